/**
 * Inbound envelopes taken in turns (fair queuing). Frames read from the actor streams wait here,
 * one queue per peer, and are handed on in rounds: each host (an IPv4 address, an IPv6 /64) in
 * turn, and within a host each of its peers in turn, one frame at a time. A peer writing valid
 * envelopes as fast as it can then has them checked no more often than any other peer with
 * envelopes waiting. Before, every frame was parsed and its signature checked as it was read:
 * one such peer held the node's /health at 0.86 s and another peer's invokes at 2.4 s.
 *
 * A turn runs in the event loop's check phase and hands frames on for at most TURN_MS, so HTTP
 * requests and every stream are read between turns. A peer with MAX_IN_FLIGHT envelopes still
 * being admitted (checked, routed) is passed over until one is. A peer with more than PAUSE_BYTES
 * or PAUSE_FRAMES waiting has its streams paused, which stops crediting its yamux window (no
 * wider than the read buffer a paused stream keeps: host.ts MAX_STREAM_WINDOW), so it waits at
 * its own end; they are resumed once half of that is taken. Past TOTAL_BYTES waiting over every
 * peer, any stream that brings more is paused too, until half of that is taken.
 */
import type { Stream } from '@libp2p/interface';
import { Fifo } from '../fifo.js';

/** How long one turn hands frames on before the event loop reads and answers anything else. */
export const TURN_MS = 2;
/** Envelopes of one peer being admitted at once: more wait in its queue. */
export const MAX_IN_FLIGHT = 64;
/** What a peer may have waiting before its streams are paused. */
export const PAUSE_FRAMES = 1024;
export const PAUSE_BYTES = 4 * 1024 * 1024;
/** What every peer together may have waiting before any stream that brings more is paused. */
export const TOTAL_BYTES = 64 * 1024 * 1024;

export interface FairIntakeOptions {
  /** Hands one frame on: parsed, checked and routed; a promise while it is being admitted. */
  deliver(frame: Uint8Array, peer: string, at: number | undefined, host: string): PromiseLike<unknown> | void;
  turnMs?: number;
  maxInFlight?: number;
  pauseFrames?: number;
  pauseBytes?: number;
  totalBytes?: number;
}

interface Waiting {
  frame: Uint8Array;
  at: number | undefined;
}

/** One peer's frames, oldest first. */
class PeerQueue {
  private readonly frames = new Fifo<Waiting>();
  bytes = 0;
  inFlight = 0;
  /** Its streams this queue paused. */
  readonly paused = new Set<Stream>();

  constructor(
    readonly peer: string,
    readonly host: string,
  ) {}

  get length(): number {
    return this.frames.length;
  }

  push(w: Waiting): void {
    this.frames.push(w);
    this.bytes += w.frame.byteLength;
  }

  shift(): Waiting {
    const w = this.frames.shift();
    this.bytes -= w.frame.byteLength;
    return w;
  }
}

export class FairIntake {
  /** Every peer with frames waiting or envelopes in flight. */
  private readonly peers = new Map<string, PeerQueue>();
  /** Hosts with frames waiting, and their peers with frames waiting, each in the order they are next served. */
  private readonly hosts = new Map<string, Map<string, PeerQueue>>();
  /** Peers with a stream paused here. */
  private readonly pausedPeers = new Set<PeerQueue>();
  /** Bytes waiting over every peer, and whether they passed the total since they were last at half of it. */
  private bytes = 0;
  private overTotal = false;
  private scheduled = false;
  private stopped = false;
  private readonly turnMs: number;
  private readonly maxInFlight: number;
  private readonly pauseFrames: number;
  private readonly pauseBytes: number;
  private readonly totalBytes: number;

  constructor(private readonly opts: FairIntakeOptions) {
    this.turnMs = opts.turnMs ?? TURN_MS;
    this.maxInFlight = opts.maxInFlight ?? MAX_IN_FLIGHT;
    this.pauseFrames = opts.pauseFrames ?? PAUSE_FRAMES;
    this.pauseBytes = opts.pauseBytes ?? PAUSE_BYTES;
    this.totalBytes = opts.totalBytes ?? TOTAL_BYTES;
  }

  /** Frames waiting over every peer. */
  get waiting(): number {
    let n = 0;
    for (const q of this.peers.values()) n += q.length;
    return n;
  }

  /** What `peer` has waiting and in flight. */
  of(peer: string): { waiting: number; bytes: number; inFlight: number; paused: number } {
    const q = this.peers.get(peer);
    return { waiting: q?.length ?? 0, bytes: q?.bytes ?? 0, inFlight: q?.inFlight ?? 0, paused: q?.paused.size ?? 0 };
  }

  /** A whole frame read from `stream` of `peer` on `host`; `at` is when its read began (stage timings). */
  push(peer: string, host: string, stream: Stream, frame: Uint8Array, at: number | undefined): void {
    if (this.stopped) return;
    let q = this.peers.get(peer);
    if (!q) this.peers.set(peer, (q = new PeerQueue(peer, host)));
    if (q.length === 0) this.ready(q);
    q.push({ frame, at });
    this.bytes += frame.byteLength;
    if (this.bytes > this.totalBytes) this.overTotal = true;
    if ((q.length > this.pauseFrames || q.bytes > this.pauseBytes || this.overTotal) && !q.paused.has(stream)) {
      q.paused.add(stream);
      this.pausedPeers.add(q);
      // Not within the read that brought the frame: that read may be a resume handing on what the
      // stream held, and yamux credits the sender once it is over, paused or not, so a stream
      // paused within it had its read buffer overrun and was reset.
      queueMicrotask(() => {
        if (q.paused.has(stream) && stream.readStatus === 'readable') stream.pause();
      });
    }
    this.schedule();
  }

  /** Forgets what `peer` has waiting (it was banned): nothing more of it is handed on. */
  drop(peer: string): void {
    const q = this.peers.get(peer);
    if (!q) return;
    while (q.length > 0) this.bytes -= q.shift().frame.byteLength;
    this.unready(q);
    q.paused.clear();
    this.pausedPeers.delete(q);
    this.forgetIfIdle(q);
  }

  /** Hands nothing on any more. */
  stop(): void {
    this.stopped = true;
    for (const q of [...this.peers.values()]) this.drop(q.peer);
  }

  private schedule(): void {
    if (this.scheduled || this.stopped) return;
    this.scheduled = true;
    setImmediate(this.turn);
  }

  private readonly turn = (): void => {
    this.scheduled = false;
    const end = performance.now() + this.turnMs;
    for (;;) {
      const q = this.next();
      if (!q) return;
      this.handOn(q);
      if (performance.now() >= end) break;
    }
    // Left for the next turn, after the event loop has read what else came.
    if (this.next(false)) this.schedule();
  };

  /**
   * The peer whose frame goes next: the first host in order with a peer that has a frame and room
   * in flight, and within it the first such peer. Both move to the back when `take` (round robin).
   */
  private next(take = true): PeerQueue | undefined {
    for (const [host, peers] of this.hosts) {
      for (const q of peers.values()) {
        if (q.inFlight >= this.maxInFlight) continue;
        if (take) {
          peers.delete(q.peer);
          peers.set(q.peer, q);
          this.hosts.delete(host);
          this.hosts.set(host, peers);
        }
        return q;
      }
    }
    return undefined;
  }

  private handOn(q: PeerQueue): void {
    const w = q.shift();
    this.bytes -= w.frame.byteLength;
    if (q.length === 0) this.unready(q);
    if (this.overTotal && this.bytes <= this.totalBytes / 2) {
      this.overTotal = false;
      for (const p of this.pausedPeers) if (this.underHalf(p)) this.resume(p);
    } else if (q.paused.size > 0 && !this.overTotal && this.underHalf(q)) {
      this.resume(q);
    }
    let admitting: PromiseLike<unknown> | void = undefined;
    try {
      admitting = this.opts.deliver(w.frame, q.peer, w.at, q.host);
    } catch {
      // deliver reports its own failures; one that escaped must not stop the turns.
    }
    if (admitting) {
      q.inFlight++;
      const done = () => {
        q.inFlight--;
        if (q.length > 0) this.schedule();
        else this.forgetIfIdle(q);
      };
      admitting.then(done, done);
    } else if (q.length === 0) {
      this.forgetIfIdle(q);
    }
  }

  private underHalf(q: PeerQueue): boolean {
    return q.length <= this.pauseFrames / 2 && q.bytes <= this.pauseBytes / 2;
  }

  private resume(q: PeerQueue): void {
    const paused = [...q.paused];
    q.paused.clear();
    this.pausedPeers.delete(q);
    // A stream resumed hands on what it read while paused at once: pushed here, not handed on.
    for (const s of paused) if (s.readStatus === 'paused') s.resume();
  }

  /** `q` has frames waiting: served in its host's turn, after the peers already waiting. */
  private ready(q: PeerQueue): void {
    let peers = this.hosts.get(q.host);
    if (!peers) this.hosts.set(q.host, (peers = new Map()));
    peers.set(q.peer, q);
  }

  private unready(q: PeerQueue): void {
    const peers = this.hosts.get(q.host);
    if (!peers?.delete(q.peer)) return;
    if (peers.size === 0) this.hosts.delete(q.host);
  }

  private forgetIfIdle(q: PeerQueue): void {
    if (q.length === 0 && q.inFlight === 0 && this.peers.get(q.peer) === q) this.peers.delete(q.peer);
  }
}
