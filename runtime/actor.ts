import { randomBytes } from 'node:crypto';
import { type AddOptions, type Behavior, behaviorLabel, BehaviorRegistry, isReplyWaiter, notWaiting, replySentAt, replyWaiter } from './behavior.js';
import { sealEnvelope } from './crypto/signing.js';
import type { KeyPair } from './crypto/keys.js';
import type * as z from 'zod';
import { errorReply, parseErrorReply, replyToError } from './error-reply.js';
import { cutText, DmsError, errorText, invalid, notFound } from './errors.js';
import { createLifecycle, type LifecycleState } from './lifecycle.js';
import { LogGate } from './log.js';
import { Mailbox, type MailboxOptions } from './mailbox.js';
import { stageEnd, stageMark, stageStart } from './stage-timings.js';
import type { ActorSystem, Verification } from './system.js';
import { msToNs, nextNonce, nowNs, isExpired } from './time.js';
import { decodePayload, describeIssues, emptyHandle, encodePayload, type Envelope, type Handle } from './wire/envelope.js';

/** What `await` would wait for: a promise, or any object with a `then` method. */
const isThenable = (v: unknown): v is PromiseLike<unknown> => typeof (v as { then?: unknown } | null | undefined)?.then === 'function';

/**
 * A named address on this node with its own behaviors. An actor owns its primary inbox and
 * may open more (the HTTP actor opens one per waiting REST client); all of them feed the
 * actor's one mailbox.
 */
export class Inbox {
  readonly behaviors = new BehaviorRegistry();
  constructor(
    readonly name: string,
    readonly actor: Actor,
  ) {}
}

export interface ActorOptions {
  inbox: string;
  /** The actor's own key; defaults to the node key. */
  key?: KeyPair;
  mailbox?: Partial<MailboxOptions>;
  /** Broadcast topics the primary inbox subscribes to. */
  topics?: string[];
}

export interface SendOptions {
  /** Expiry in ns since the epoch; defaults to now + ttlMs. */
  exp?: bigint;
  ttlMs?: number;
  cont?: string;
  topic?: string;
  cap?: Uint8Array;
  /**
   * Leave the envelope unsigned. Only for a destination on this node: the kernel checks
   * signatures where envelopes enter the node, so one that never leaves is trusted as it is.
   */
  unsigned?: boolean;
  /**
   * The payload is already `parse`'s output of this schema (a REST route checked its body): a
   * behavior of this node taking the same schema is handed it as it is, neither decoded nor
   * checked a second time. Its encoded `msg` is made as for any envelope.
   */
  checked?: z.ZodType;
}

/**
 * Payloads a sender in this process already checked, by the envelope carrying them. Only
 * `Actor.envelope` adds one, so an envelope that came from anywhere else (a peer, a REST
 * caller's own) is never in it.
 */
const checkedPayloads = new WeakMap<Envelope, { schema: z.ZodType; value: unknown }>();

export interface Reply<T = unknown> {
  env: Envelope;
  payload: T;
}

interface Delivery {
  env: Envelope;
  inbox: Inbox;
  /** A reply the kernel routed (Actor.reply, refusals): only a reply waiter may take it. */
  reply: boolean;
  /** How the kernel found it trustworthy where it entered (for observers). */
  verified?: Verification;
  /** When it was queued (performance.now()), while anyone times stages. */
  queuedAt?: number;
}

const DEFAULT_TTL_MS = 30_000;
const REPLY_WARN_EVERY_MS = 10_000;
/** Characters of another node's error reply kept (Actor.call). */
export const MAX_PEER_ERROR_TEXT = 2000;

export interface CollectOptions {
  /** When the wait ends at the latest (ms since the epoch). */
  until: number;
  /** Most replies taken. */
  max: number;
  /** Most bytes taken, all replies together; a reply larger than this on its own is left out. */
  maxBytes: number;
  /** A reply's bytes; default its payload's. */
  sizeOf?: (reply: Envelope) => number;
  /** Claims a reply's bytes from an allowance beyond this collection's (a REST client's): false ends it. */
  claim?: (bytes: number) => boolean;
  /** Called with the replies taken (the newest last; with `keep: false`, the newest alone); true ends the wait: the replies suffice. */
  enough?: (replies: readonly Envelope[]) => boolean;
  /** Ends the wait at once, with the replies so far. */
  signal?: AbortSignal;
  /**
   * What one host's replies may take: past `replies` of them, or `bytes` together, its others
   * are dropped, counting against no bound. A peer answering many times over, or with replies
   * as large as an envelope may be, would otherwise use up `max` or `maxBytes` before the other
   * nodes' answers come, and end the wait. `{ replies: 1 }` for a question every node answers
   * once (a bid request).
   */
  perHost?: { replies: number; bytes?: number };
  /** Only replies from these hosts (those asked) are taken; any other is dropped, counting against no bound. */
  hosts?: ReadonlySet<string>;
  /**
   * `false`: each reply is handed to `enough` as it comes and not kept (the wait resolves with
   * none), so `maxBytes` bounds each reply alone: a few peers' replies as large as an envelope
   * may be cannot fill the collection and end it before the others' answers come.
   */
  keep?: false;
}

/**
 * The one collector of replies to a broadcast (Actor.gather, the HTTP actor's broadcasts): takes
 * what comes to `cont` on `inbox` until `until`, `max` replies, `maxBytes`, a refused claim,
 * `enough` or `signal`, whichever comes first, and resolves with the replies taken. The reply
 * waiter is gone when it resolves; later replies are dead letters.
 */
export function collectReplies(inbox: Inbox, cont: string, opts: CollectOptions): Promise<Envelope[]> {
  const replies: Envelope[] = [];
  const sizeOf = opts.sizeOf ?? ((reply: Envelope) => reply.msg.byteLength);
  const kept = opts.keep !== false;
  /** Replies and bytes taken per host, when they are bounded. */
  const heard = new Map<string, { replies: number; bytes: number }>();
  const perHost = opts.perHost;
  const here = inbox.actor.system.host;
  let bytes = 0;
  let taken = 0;
  return new Promise<Envelope[]>((resolve) => {
    const done = () => {
      opts.signal?.removeEventListener('abort', done);
      inbox.behaviors.remove(cont);
      resolve(kept ? replies : []);
    };
    inbox.behaviors.add(
      replyWaiter(cont, (reply) => {
        const host = reply.from.addr.host;
        if (opts.hosts && !opts.hosts.has(host)) return;
        const size = sizeOf(reply);
        if (size > opts.maxBytes) return;
        let fromHost: { replies: number; bytes: number } | undefined;
        if (perHost) {
          // An empty host is this node too: naming it both ways is not two shares.
          fromHost = heard.get(host || here) ?? { replies: 0, bytes: 0 };
          if (fromHost.replies >= perHost.replies || fromHost.bytes + size > (perHost.bytes ?? Infinity)) return;
        }
        if (kept && (bytes + size > opts.maxBytes || (opts.claim && !opts.claim(size)))) return done();
        if (fromHost) {
          fromHost.replies++;
          fromHost.bytes += size;
          heard.set(host || here, fromHost);
        }
        taken++;
        if (kept) {
          bytes += size;
          replies.push(reply);
        }
        if (taken >= opts.max || (kept && bytes === opts.maxBytes) || opts.enough?.(kept ? replies : [reply])) done();
      }),
      { expiresAt: opts.until, onExpire: done },
    );
    if (opts.signal?.aborted) done();
    else opts.signal?.addEventListener('abort', done, { once: true });
  });
}

export interface GatherOptions extends Omit<CollectOptions, 'until' | 'sizeOf' | 'claim'> {
  /** Longest the replies are waited for (ms). */
  windowMs: number;
  /** The broadcast's expiry from now (ms); default the window and a second. */
  ttlMs?: number;
}

export class Actor {
  readonly handle: Handle;
  readonly primary: Inbox;
  readonly key: KeyPair;
  private readonly mailbox: Mailbox<Delivery>;
  private readonly lifecycle = createLifecycle();
  /** Lines about replies not delivered: at most one per REPLY_WARN_EVERY_MS. */
  private readonly replyWarnings = new LogGate(REPLY_WARN_EVERY_MS);

  constructor(
    readonly system: ActorSystem,
    readonly options: ActorOptions,
  ) {
    this.key = options.key ?? system.key;
    this.handle = { id: this.key.id, did: this.key.did, addr: { host: system.host, inbox: options.inbox } };
    this.primary = new Inbox(options.inbox, this);
    this.mailbox = new Mailbox<Delivery>(
      options.inbox,
      { ...system.mailboxDefaults, ...options.mailbox },
      (d) => this.dispatch(d),
      (e, d) => this.failedOutsideHandler(e, d),
    );
    this.lifecycle.subscribe((s) => system.emit({ type: 'lifecycle', actor: options.inbox, state: s.value as LifecycleState }));
  }

  get state(): LifecycleState {
    return this.lifecycle.getSnapshot().value as LifecycleState;
  }

  get name(): string {
    return this.options.inbox;
  }

  /** Envelopes waiting or in progress, and how many the mailbox holds before it refuses. */
  get load(): { depth: number; capacity: number } {
    return { depth: this.mailbox.size, capacity: this.mailbox.options.capacity };
  }

  start(): void {
    this.system.bind(this.primary);
    for (const topic of this.options.topics ?? []) this.system.subscribe(topic, this.primary);
    this.lifecycle.send({ type: 'started' });
  }

  async stop(): Promise<void> {
    if (this.state === 'stopped' || this.state === 'stopping') return;
    this.lifecycle.send({ type: 'stop' });
    this.system.unbindAll(this);
    await this.mailbox.close();
    this.primary.behaviors.clear();
    this.lifecycle.send({ type: 'stopped' });
  }

  // --- behaviors -------------------------------------------------------------------------

  add(behavior: Behavior<any, any>, opts?: AddOptions): void {
    this.primary.behaviors.add(behavior, opts);
  }

  remove(name: string): boolean {
    return this.primary.behaviors.remove(name);
  }

  /** Opens another inbox on this node that feeds this actor (for replies to REST clients). */
  openInbox(name: string): Inbox {
    const inbox = new Inbox(name, this);
    this.system.bind(inbox);
    return inbox;
  }

  closeInbox(inbox: Inbox): void {
    inbox.behaviors.clear();
    this.system.unbind(inbox);
  }

  // --- receiving -------------------------------------------------------------------------

  /**
   * Queues a delivery; throws when the actor is not running or its mailbox is full. A reply to
   * one of this actor's own calls skips the queue: it is not work, it ends work in progress.
   * Queued, it would wait behind requests for a slot that only its own waiter can free: with
   * every slot's handler awaiting a call, the replies sat behind newer requests until all of
   * those calls timed out at once (a provider under a burst of placements, 5 s at a time).
   * Only a waiter this actor registered takes one, so they are as many as its calls in flight.
   * `sender` is whose turn it takes in the mailbox and `group` whose share it counts against
   * (ActorSystem's senderOf; the node's own by default).
   */
  deliver(env: Envelope, inbox: Inbox = this.primary, reply = false, verified?: Verification, sender?: string, group?: string): void {
    if (this.state !== 'running') throw new DmsError('unavailable', `actor ${this.name} is ${this.state}`);
    const delivery: Delivery = { env, inbox, reply, verified, queuedAt: stageStart() };
    const waiter = inbox.behaviors.get(env.be);
    if (waiter && isReplyWaiter(waiter)) {
      this.dispatch(delivery).catch((e: unknown) => this.failedOutsideHandler(e, delivery));
      return;
    }
    this.mailbox.post(delivery, sender, group);
  }

  private failedOutsideHandler(e: unknown, d: Delivery): void {
    this.system.log.error({ err: e, be: d.env.be, actor: this.name }, 'behavior failed outside its handler');
  }

  private async dispatch({ env, inbox, reply, verified, queuedAt }: Delivery): Promise<void> {
    // A handler never runs inside its sender's call: the mailbox calls this as an item is
    // posted, and the sender (often a machine in the middle of a transition) finishes first, as
    // the actor model promises. This is the one wait between them; the awaits below happen only
    // for work that is asynchronous (test/jobs/transitions.test.ts shows the order it keeps).
    await Promise.resolve();
    const host = this.system.host;
    const start = stageStart();
    stageEnd(host, 'mailbox.wait', queuedAt);
    // Checked again here: the waiter may have gone, and another behavior taken its name, while queued.
    const waiting = inbox.behaviors.get(env.be);
    if (this.system.watched) {
      const sentAt = replySentAt(waiting);
      const replyMs = sentAt === undefined ? undefined : Math.round((performance.now() - sentAt) * 100) / 100;
      this.system.emit({ type: 'deliver', actor: inbox.name, env, verified, replyMs });
    }
    if (isExpired(env.opt.exp)) {
      this.system.deadLetter(env, 'expired while queued');
      return;
    }
    if (reply && waiting && !isReplyWaiter(waiting)) {
      this.system.deadLetter(env, notWaiting(inbox.name, env.be));
      return;
    }
    const behavior = inbox.behaviors.take(env.be);
    const metrics = this.system.metrics;
    if (!behavior) {
      this.system.deadLetter(env, `no behavior ${env.be} at ${inbox.name}`);
      await this.replyError(env, notFound(`no behavior ${env.be} at actor ${inbox.name}`), inbox);
      return;
    }
    let payload: unknown = env.msg;
    try {
      // Awaited only when it returns a promise: each await of a settled value waits behind every
      // continuation queued before it (crypto/ed25519.ts), ~0.1 ms on a busy node.
      const authorizing = this.system.authorize(env, behavior, inbox);
      if (authorizing) await authorizing;
      const checked = behavior.raw ? undefined : checkedPayloads.get(env);
      if (checked && checked.schema === behavior.payload) payload = checked.value;
      else if (!behavior.raw) {
        payload = decodePayload(env.msg);
        if (behavior.payload) {
          const parsed = behavior.payload.safeParse(payload);
          if (!parsed.success) throw invalid(`invalid payload for ${env.be}: ${describeIssues(parsed.error)}`);
          payload = parsed.data;
        }
      }
    } catch (e) {
      metrics?.envelope(behaviorLabel(behavior), 'refused');
      await this.replyError(env, e, inbox);
      return;
    }
    let result: unknown;
    stageEnd(host, 'behavior.prepare', start);
    const called = start === undefined ? undefined : performance.now();
    try {
      result = behavior.handle({ env, payload, actor: this, inbox });
      if (isThenable(result)) result = await result;
    } catch (e) {
      metrics?.envelope(behaviorLabel(behavior), 'error');
      await this.replyError(env, e, inbox);
      return;
    }
    stageEnd(host, 'behavior.handle', called);
    metrics?.envelope(behaviorLabel(behavior), 'ok');
    if (env.opt.cont && !behavior.noReply) {
      await this.reply(env, result ?? {});
      stageMark(host, 'served', env, called === undefined ? undefined : performance.now());
    }
  }

  // --- sending ---------------------------------------------------------------------------

  /** A new unsigned envelope from this actor. */
  envelope(to: Handle, be: string, payload: unknown, opts: SendOptions = {}): Envelope {
    const env: Envelope = {
      to,
      be,
      from: this.handle,
      nonce: nextNonce(),
      opt: { exp: opts.exp ?? nowNs() + msToNs(opts.ttlMs ?? DEFAULT_TTL_MS) },
      msg: payload instanceof Uint8Array ? payload : encodePayload(payload),
    };
    if (opts.cont) env.opt.cont = opts.cont;
    if (opts.topic) env.opt.topic = opts.topic;
    if (opts.cap) env.cap = opts.cap;
    if (opts.checked && !(payload instanceof Uint8Array)) checkedPayloads.set(env, { schema: opts.checked, value: payload });
    return env;
  }

  async send(to: Handle, be: string, payload: unknown, opts: SendOptions = {}): Promise<void> {
    await this.post(this.envelope(to, be, payload, opts), opts);
  }

  /** Signs `env` unless it may stay unsigned (`seal`), then routes it. */
  private async post(env: Envelope, opts: SendOptions): Promise<void> {
    const sealing = this.seal(env, opts);
    if (sealing) await sealing;
    await this.system.route(env);
  }

  /**
   * Asks `to` and returns the reply's payload checked against `schema`, waiting until the
   * envelope's exp (`opts.ttlMs`); an error reply is thrown as the DmsError it describes, so a
   * caller on any node (and the REST routes, which must answer 404 or 409 rather than 500) can
   * tell an unknown job from a refused transition. Unsigned when it stays on this node.
   */
  async call<S extends z.ZodType>(to: Handle, be: string, payload: unknown, schema: S, opts: SendOptions = {}): Promise<z.output<S>> {
    // A request's trip through this node's actors need not pay for a signature on every hop.
    const reply = await this.invoke<unknown>(to, be, payload, { ...opts, unsigned: this.system.isHere(to.addr.host) });
    const error = parseErrorReply(reply.payload);
    // Another node's words are kept to a bound: they become a job's error, its history, a REST
    // answer, and an envelope may carry a megabyte of them.
    if (error) throw replyToError(this.system.isHere(to.addr.host) ? error : { ...error, error: cutText(error.error, MAX_PEER_ERROR_TEXT) });
    const parsed = schema.safeParse(reply.payload);
    if (!parsed.success) throw new DmsError('internal', `reply to ${be} does not match its schema: ${parsed.error.message}`);
    return parsed.data;
  }

  /**
   * Sends `be` to `to` without waiting for an answer (notifications, fire-and-forget requests);
   * unsigned when it stays on this node. Resolves once the envelope is routed.
   */
  tell(to: Handle, be: string, payload: unknown, opts: SendOptions = {}): Promise<void> {
    return this.send(to, be, payload, { ...opts, unsigned: this.system.isHere(to.addr.host) });
  }

  /** The handle of this node's actor at `inbox`: what a local caller addresses. */
  local(inbox: string): Handle {
    return { id: this.system.key.id, did: this.system.key.did, addr: { host: this.system.host, inbox } };
  }

  /** Sends and waits for the reply until the envelope's expiry. */
  async invoke<T = unknown>(to: Handle, be: string, payload: unknown, opts: SendOptions = {}): Promise<Reply<T>> {
    const env = this.envelope(to, be, payload, opts);
    env.opt.cont = `/private/reply/${env.nonce}`;
    const reply = this.awaitReply<T>(this.primary, env.opt.cont, env.opt.exp, to.addr.host);
    const metrics = this.system.metrics;
    if (metrics) {
      const sent = performance.now();
      const kind = this.system.isHere(to.addr.host) ? 'local' : 'remote';
      reply.then(() => metrics.invoked(kind, (performance.now() - sent) / 1000), () => undefined);
    }
    try {
      // Unsigned, or signed inline, nothing is awaited before routing: the envelope is queued before invoke returns.
      await this.post(env, opts);
    } catch (e) {
      this.primary.behaviors.remove(env.opt.cont);
      throw e;
    }
    return reply;
  }

  /**
   * Broadcasts `be` on `topic` (signed: it goes to other nodes) and collects the replies
   * (collectReplies) for at most `opts.windowMs`, and never past the broadcast's expiry.
   */
  async gather(topic: string, be: string, payload: unknown, opts: GatherOptions): Promise<Envelope[]> {
    const env = this.envelope(emptyHandle(), be, payload, { topic, ttlMs: opts.ttlMs ?? opts.windowMs + 1_000 });
    const cont = `/private/gather/${env.nonce}`;
    env.opt.cont = cont;
    const until = Math.min(Date.now() + opts.windowMs, Number(env.opt.exp / 1_000_000n));
    const replies = collectReplies(this.primary, cont, { ...opts, until });
    try {
      await this.post(env, {});
    } catch (e) {
      this.primary.behaviors.remove(cont);
      throw e;
    }
    return replies;
  }

  /**
   * `gather` addressed instead of published: the same question to each of `to` (an inbox on
   * each of several nodes) directly, one envelope each, their replies collected together at one
   * reply address as a broadcast's are. A destination that cannot be reached is left out (its
   * answer is simply missing); only when none can be is the gather refused.
   */
  async gatherFrom(to: readonly Handle[], be: string, payload: unknown, opts: GatherOptions): Promise<Envelope[]> {
    if (to.length === 0) throw invalid('gatherFrom needs at least one destination');
    const msg = encodePayload(payload);
    const envs = to.map((h) => this.envelope(h, be, msg, { ttlMs: opts.ttlMs ?? opts.windowMs + 1_000 }));
    const cont = `/private/gather/${envs[0].nonce}`;
    for (const env of envs) env.opt.cont = cont;
    const until = Math.min(Date.now() + opts.windowMs, Number(envs[0].opt.exp / 1_000_000n));
    // Answers from the nodes asked only: the reply address is no secret to them, but a peer not asked has nothing to answer.
    // (This node's own answer may name its host or none.)
    const hosts = new Set(to.flatMap((h) => (this.system.isHere(h.addr.host) ? [this.system.host, ''] : [h.addr.host])));
    const replies = collectReplies(this.primary, cont, { ...opts, until, hosts });
    // This node's own copy stays unsigned, as any envelope between its actors.
    const sent = await Promise.allSettled(envs.map((env) => this.post(env, { unsigned: this.system.isHere(env.to.addr.host) })));
    const failed = sent.filter((r): r is PromiseRejectedResult => r.status === 'rejected');
    if (failed.length === envs.length) {
      this.primary.behaviors.remove(cont);
      throw failed[0].reason;
    }
    return replies;
  }

  /** Whether `h` is the primary inbox of an actor of this node. */
  private isActorHere(h: Handle): boolean {
    if (!this.system.isHere(h.addr.host)) return false;
    const inbox = this.system.inbox(h.addr.inbox);
    return inbox !== undefined && inbox === inbox.actor.primary;
  }

  /** Signs the envelope in place (a promise only when the signature went to the pool), unless `opts.unsigned` and it stays on this node. */
  private seal(env: Envelope, opts: SendOptions): void | Promise<void> {
    if (!opts.unsigned) return sealEnvelope(env, this.key);
    if (!this.system.isHere(env.to.addr.host)) throw invalid('only an envelope for this node may stay unsigned');
  }

  /**
   * Registers a one-shot behavior at `cont` on `inbox` that resolves with the reply from `from`
   * (the host the request went to, ../behavior.ts replyWaiter) or rejects at `exp`.
   */
  awaitReply<T>(inbox: Inbox, cont: string, exp: bigint, from: string): Promise<Reply<T>> {
    const reply = new Promise<Reply<T>>((resolve, reject) => {
      inbox.behaviors.add(
        replyWaiter(cont, (env) => {
          // The one-shot is gone once taken: settle on every path or the caller waits forever.
          try {
            resolve({ env, payload: decodePayload(env.msg) as T });
          } catch (e) {
            reject(e);
          }
        }, from),
        {
          once: true,
          expiresAt: Number(exp / 1_000_000n),
          onExpire: () => reject(new DmsError('timeout', `no reply before opt.exp (${cont})`)),
        },
      );
    });
    // The waiter is set before the request is sent, and the send may outlast the expiry (a REST
    // invoke's admission waits for its signature check behind a burst of others): expired with
    // nobody awaiting it yet, the rejection was unhandled and stopped the node. Whoever awaits
    // the reply still gets it.
    reply.catch(() => undefined);
    return reply;
  }

  /**
   * Replies to an invoke or broadcast: to its sender, behavior `opt.cont`, same expiry. Routed
   * as a reply, so on this node it reaches only a reply waiter, never an ordinary behavior.
   * A reply to an actor of this node's own invoke is not signed: it lands in that actor's
   * primary inbox, where the kernel's reply waiter takes it, and never leaves the node (a REST
   * client's inbox is never an actor's primary one: its replies, which it is shown, are signed).
   */
  async reply(req: Envelope, payload: unknown): Promise<void> {
    if (!req.opt.cont || isExpired(req.opt.exp)) return;
    try {
      const env = this.envelope(req.from, req.opt.cont, payload, { exp: req.opt.exp });
      const host = this.system.host;
      const signing = stageStart();
      const unsigned = this.isActorHere(req.from);
      const sealing = this.seal(env, { unsigned });
      if (sealing) await sealing;
      if (!unsigned) stageEnd(host, 'reply.sign', signing);
      const routing = signing === undefined ? undefined : performance.now();
      const routed = this.system.route(env, { kind: 'local' }, { reply: true });
      stageEnd(host, 'reply.route', routing);
      // Queued for its peer once route returns; not awaited until the peer takes it. A handler
      // waited for that, holding its slot of this actor: a peer that sent requests and read no
      // replies held every slot, and then every other sender's envelopes waited in the mailbox
      // until it was full (test/network/unread-replies). What may wait for a peer is bounded by
      // its channel (network/channel.ts), which gives up a peer that takes nothing for a while.
      if (routed) routed.then(undefined, (e: unknown) => this.undelivered(req, e));
    } catch (e) {
      this.undelivered(req, e);
    }
  }

  private undelivered(req: Envelope, e: unknown): void {
    // A REST client that gave up has closed its inbox; that is routine, not a warning. A peer
    // that reads nothing has every reply refused: one line now and then says so.
    const routine = e instanceof DmsError && e.kind === 'not_found';
    const held = routine ? 0 : this.replyWarnings.pass();
    if (held === undefined) return;
    this.system.log[routine ? 'debug' : 'warn']({ err: errorText(e), be: req.opt.cont, to: req.from.addr, ...(held ? { unlogged: held } : {}) }, 'reply not delivered');
  }

  /**
   * Answers a failure as an error reply `{error, kind}` (./error-reply.ts). Public for handlers
   * that reply themselves (`noReply`, answering after their work settles); every other handler
   * just throws and the kernel calls this.
   */
  replyError(req: Envelope, e: unknown, inbox: Inbox = this.primary): Promise<void> {
    return this.reply(req, errorReply(this.callerError(e, req, inbox)));
  }

  /**
   * What the caller is told about a failure. A DmsError is meant for callers; anything else is
   * a fault of the node whose text may show internals (paths, secrets, stack details), so the
   * caller gets an `internal` error with a short random id and the log line carries the same
   * id with the real error.
   */
  private callerError(e: unknown, env: Envelope, inbox: Inbox): DmsError {
    if (e instanceof DmsError) return e;
    const id = randomBytes(4).toString('hex');
    this.system.log.error({ err: e, error_id: id, be: env.be, actor: inbox.name }, `behavior failed: internal error (id ${id})`);
    return new DmsError('internal', `internal error (id ${id})`);
  }
}

export { emptyHandle };
