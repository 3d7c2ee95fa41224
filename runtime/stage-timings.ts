import { channel } from 'node:diagnostics_channel';
import type { Envelope } from './wire/envelope.js';

/**
 * Where an envelope's time goes on its way through a node, stage by stage: the tool for
 * finding why a cross-node invoke costs what it does (`general.stage_timings`, read at
 * `GET /api/v1/dev/stages`). The envelope path publishes its stages on the diagnostics channel
 * `dms:stage` (node:diagnostics_channel, as h3 publishes its tracing), and only while someone
 * subscribes: with nobody, each stage costs the path one `hasSubscribers` check (stageStart).
 * A node timing its stages subscribes a StageTimings; any other tool may subscribe by name.
 *
 * The stages nest; each is timed where it starts and ends in one place:
 *
 * | stage            | from → to                                                                 |
 * |------------------|---------------------------------------------------------------------------|
 * | rest.invoke      | REST invoke body in hand → reply envelope in hand (what the REST layer waits on) |
 * | rest.admit       | body → envelope parsed, checked and signed, ready to enter                |
 * | invoke.wait      | envelope entered → reply taken by its waiter                               |
 * | net.send         | transport asked to send → frame handed to the libp2p stream               |
 * | net.round_trip   | request frame handed to the stream → its reply's frame read (the wire and the peer) |
 * | net.publish      | a broadcast handed to gossipsub → gossipsub done sending it                |
 * | net.broadcast_reply | a broadcast published → each reply's frame read                         |
 * | gossip.validate  | a gossiped envelope checked before gossipsub delivers or relays it (parse, signature) |
 * | net.parse        | frame read → its turn (network/fair-intake.ts) → envelope parsed           |
 * | kernel.verify    | signature check of an envelope that entered                               |
 * | kernel.admit     | an envelope from the network: expiry, signature, replay, routed to a mailbox |
 * | mailbox.wait     | queued in an actor's mailbox → its dispatch starts                         |
 * | behavior.prepare | dispatch → handler called (capability check, payload decode and schema)    |
 * | behavior.handle  | the handler itself                                                         |
 * | reply.sign       | signing a reply                                                            |
 * | reply.route      | a signed reply routed: queued here, or handed to the stream for another node |
 * | serve            | a request's frame read → its reply handed to the stream (the peer's share of a round trip) |
 *
 * So, for a cross-node invoke, the wire's share is the requester's net.round_trip less the
 * provider's serve.
 */
export const STAGES = [
  'rest.invoke',
  'rest.admit',
  'invoke.wait',
  'net.send',
  'net.round_trip',
  'net.publish',
  'net.broadcast_reply',
  'gossip.validate',
  'net.parse',
  'kernel.verify',
  'kernel.admit',
  'mailbox.wait',
  'behavior.prepare',
  'behavior.handle',
  'reply.sign',
  'reply.route',
  'serve',
] as const;
export type Stage = (typeof STAGES)[number];

/**
 * What the envelope path publishes on `dms:stage`, each naming the node (its peer id): a stage
 * timed (`stage`), or a moment the timings pair with a later one by envelope (`request_sent`,
 * `broadcast_sent` and `frame_read` give the round trips, `frame_read` and `served` a peer's
 * share of one). Several nodes in one process publish on the one channel.
 */
export type StageEvent =
  | { host: string; kind: 'stage'; stage: Stage; ms: number }
  | { host: string; kind: 'request_sent' | 'broadcast_sent' | 'frame_read' | 'served'; env: Envelope; at: number };

export const stageChannel = channel('dms:stage');

/** performance.now() while anyone times stages, else undefined: the one check a stage costs when nobody does. */
export function stageStart(): number | undefined {
  return stageChannel.hasSubscribers ? performance.now() : undefined;
}

/** The stage that began at `start` (from stageStart) ends now; nothing when it was not timed. */
export function stageEnd(host: string, stage: Stage, start: number | undefined): void {
  if (start !== undefined) stageChannel.publish({ host, kind: 'stage', stage, ms: performance.now() - start } satisfies StageEvent);
}

/** A moment of `env` at `at` (from stageStart), for pairing with a later one; nothing when not timed. */
export function stageMark(host: string, kind: Exclude<StageEvent['kind'], 'stage'>, env: Envelope, at: number | undefined): void {
  if (at !== undefined) stageChannel.publish({ host, kind, env, at } satisfies StageEvent);
}

export interface StageFigure {
  stage: Stage;
  count: number;
  mean_ms: number;
  p50_ms: number;
  p99_ms: number;
}

// Quantiles come from the latest samples of each stage; the mean covers every one since reset.
const SAMPLES = 8192;
// Requests waiting for a reply to be timed, and broadcasts whose replies are timed; past this,
// the oldest is forgotten (its replies untimed).
const MAX_AWAITED = 10_000;

class StageStats {
  count = 0;
  totalMs = 0;
  readonly samples = new Float64Array(SAMPLES);

  add(ms: number): void {
    this.samples[this.count % SAMPLES] = ms;
    this.count++;
    this.totalMs += ms;
  }

  figure(stage: Stage): StageFigure {
    const n = Math.min(this.count, SAMPLES);
    const sorted = this.samples.slice(0, n).sort();
    const at = (q: number) => round(sorted[Math.min(n - 1, Math.floor(q * n))]);
    return { stage, count: this.count, mean_ms: round(this.totalMs / this.count), p50_ms: at(0.5), p99_ms: at(0.99) };
  }
}

const round = (ms: number) => Math.round(ms * 1000) / 1000;

/** One node's stage timings: a subscriber of `dms:stage` that keeps what that node publishes. */
export class StageTimings {
  constructor(private readonly host: string) {}

  private readonly onEvent = (message: unknown): void => {
    const e = message as StageEvent;
    if (e.host !== this.host) return;
    switch (e.kind) {
      case 'stage':
        return this.record(e.stage, e.ms);
      case 'request_sent':
        return this.requestSent(e.env, e.at);
      case 'broadcast_sent':
        return this.broadcastSent(e.env, e.at);
      case 'frame_read':
        this.arrived(e.env, e.at);
        return this.replyRead(e.env, e.at);
      case 'served': {
        const arrived = this.arrivalOf(e.env);
        if (arrived !== undefined) this.record('serve', e.at - arrived);
      }
    }
  };

  /** From now on the node's envelope path publishes its stages, and they are kept here. */
  attach(): this {
    stageChannel.subscribe(this.onEvent);
    return this;
  }

  /** No more: with no other subscriber, the envelope path is back to one check a stage. */
  detach(): void {
    stageChannel.unsubscribe(this.onEvent);
  }

  private readonly stats = new Map<Stage, StageStats>();
  /** When each envelope's frame was read off the network. */
  private readonly arrivals = new WeakMap<Envelope, number>();
  /** When each request awaiting a reply from another node left, by the reply's behavior (its opt.cont). */
  private readonly awaited = new Map<string, number>();
  /** When each broadcast from here that wants replies was published, by its opt.cont; replies come from many nodes. */
  private readonly published = new Map<string, number>();

  record(stage: Stage, ms: number): void {
    let s = this.stats.get(stage);
    if (!s) this.stats.set(stage, (s = new StageStats()));
    s.add(ms);
  }

  /** The frame holding `env` was read at `at`. */
  arrived(env: Envelope, at: number): void {
    this.arrivals.set(env, at);
  }

  arrivalOf(env: Envelope): number | undefined {
    return this.arrivals.get(env);
  }

  /** A request that wants a reply (`opt.cont`) was handed to the stream at `at`. */
  requestSent(env: Envelope, at: number): void {
    const cont = env.opt.cont;
    if (!cont) return;
    if (this.awaited.size >= MAX_AWAITED) this.awaited.delete(this.awaited.keys().next().value!);
    this.awaited.set(cont, at);
  }

  /** A broadcast that wants replies (`opt.cont`) was published at `at`. */
  broadcastSent(env: Envelope, at: number): void {
    const cont = env.opt.cont;
    if (!cont) return;
    if (this.published.size >= MAX_AWAITED) this.published.delete(this.published.keys().next().value!);
    this.published.set(cont, at);
  }

  /** An envelope was read off the network at `at`: if it answers a request or broadcast sent from here, time its trip. */
  replyRead(env: Envelope, at: number): void {
    const sent = this.awaited.get(env.be);
    if (sent !== undefined) {
      this.awaited.delete(env.be);
      this.record('net.round_trip', at - sent);
      return;
    }
    const published = this.published.get(env.be);
    if (published !== undefined) this.record('net.broadcast_reply', at - published);
  }

  /** Every stage timed since the last reset, in path order. */
  snapshot(): StageFigure[] {
    return STAGES.flatMap((stage) => {
      const s = this.stats.get(stage);
      return s ? [s.figure(stage)] : [];
    });
  }

  reset(): void {
    this.stats.clear();
    this.awaited.clear();
    this.published.clear();
  }
}
