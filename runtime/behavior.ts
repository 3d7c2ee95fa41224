import type * as z from 'zod';
import type { Actor, Inbox } from './actor.js';
import type { Envelope } from './wire/envelope.js';

/** What a behavior's handler sees: the envelope, its validated payload, and who is handling it. */
export interface BehaviorContext<P> {
  env: Envelope;
  payload: P;
  actor: Actor;
  inbox: Inbox;
}

/**
 * A named, typed unit of actor behavior. The payload schema is declared once: it validates
 * incoming payloads, types the handler and words the error a caller gets.
 */
export interface Behavior<P = unknown, R = unknown> {
  /** `/`-separated path, e.g. `/public/hello`. */
  name: string;
  /** Schema of the JSON payload; absent means any JSON value. */
  payload?: z.ZodType<P>;
  /** Hand the handler the payload bytes undecoded (binary payloads). */
  raw?: boolean;
  /**
   * Capability a caller needs (docs/CAPABILITIES.md). Defaults to the behavior's own name;
   * `/public/*` behaviors need none, and neither does `''` (reply waiters: the request invited
   * whoever answers it).
   */
  capability?: string;
  /** One line for catalogues and `--help`. */
  description?: string;
  /**
   * The handler. Its result is the reply payload when the envelope carries `opt.cont`
   * (undefined replies `{}`); a thrown error replies `{"error": …, "kind": …}`, a DmsError
   * with its own text and kind, anything else as `internal` (./error-reply.ts).
   */
  handle(ctx: BehaviorContext<P>): R | Promise<R>;
  /** When true no reply is sent even if the envelope asks for one (the handler replies itself). */
  noReply?: boolean;
}

/** Helper that keeps P and R inferred from the schema and handler. */
export function defineBehavior<P, R>(b: Behavior<P, R>): Behavior<P, R> {
  return b;
}

/** Brands the behaviors made by `replyWaiter`: the only ones the kernel delivers its own replies to. */
const REPLY_WAITER = Symbol('dms.replyWaiter');

/**
 * The behavior at an invoke's or broadcast's `opt.cont` that takes its replies: it needs no
 * capability (the request itself invited whoever answers), sends no reply of its own, and
 * sees the envelope as it came. Register it one-shot or expiring: it waits for one request's replies.
 *
 * `from` is the host an invoke went to (its `to.addr.host`; empty for this node): the kernel
 * then hands the waiter only replies from that node. A cont is no secret (a REST caller picks
 * its own, the node's are nonces, which are timestamps), so without it any peer could answer
 * in place of the node that was asked. A broadcast's waiter leaves it out: any node may answer.
 */
export function replyWaiter(cont: string, take: (env: Envelope) => void, from?: string): Behavior<Uint8Array, void> {
  const waiter: Behavior<Uint8Array, void> = { name: cont, capability: '', noReply: true, raw: true, handle: ({ env }) => take(env) };
  // When the request was sent (performance.now()): observers see how long its reply took.
  return Object.assign(waiter, { [REPLY_WAITER]: true, [SENT_AT]: performance.now(), [REPLY_FROM]: from });
}

const SENT_AT = Symbol('dms.replySentAt');
const REPLY_FROM = Symbol('dms.replyFrom');

/** The host a reply waiter takes replies from (empty: this node); undefined when any may answer, or for any other behavior. */
export const replyFromHost = (b: Behavior<any, any>): string | undefined => (b as { [REPLY_FROM]?: string })[REPLY_FROM];

/** When the request a reply waiter waits for was sent (performance.now()); undefined for any other behavior. */
export const replySentAt = (b: Behavior<any, any> | undefined): number | undefined => (b as { [SENT_AT]?: number } | undefined)?.[SENT_AT];

/** Whether `b` waits for replies (made by `replyWaiter`), as opposed to an ordinary behavior. */
export const isReplyWaiter = (b: Behavior<any, any>): boolean => (b as { [REPLY_WAITER]?: boolean })[REPLY_WAITER] === true;

/** Why a reply was dropped: the behavior it names is not a continuation waiting for it. */
export const notWaiting = (inbox: string, be: string): string => `reply to ${be} at ${inbox} dropped: no reply waiter there`;

export interface AddOptions {
  /** Removed after its first delivery (invoke replies). */
  once?: boolean;
  /** Removed at this time (ms since epoch); `onExpire` then runs. */
  expiresAt?: number;
  onExpire?: () => void;
}

interface Entry {
  behavior: Behavior<any, any>;
  once: boolean;
  timer?: NodeJS.Timeout;
}

/** The behaviors bound to one inbox. */
export class BehaviorRegistry {
  private readonly entries = new Map<string, Entry>();

  add(behavior: Behavior<any, any>, opts: AddOptions = {}): void {
    this.remove(behavior.name);
    const entry: Entry = { behavior, once: opts.once ?? false };
    if (opts.expiresAt !== undefined) {
      const delay = Math.min(Math.max(opts.expiresAt - Date.now(), 0), 2_147_483_647);
      entry.timer = setTimeout(() => {
        if (this.entries.get(behavior.name) !== entry) return;
        this.entries.delete(behavior.name);
        opts.onExpire?.();
      }, delay);
      entry.timer.unref();
    }
    this.entries.set(behavior.name, entry);
  }

  remove(name: string): boolean {
    const entry = this.entries.get(name);
    if (!entry) return false;
    if (entry.timer) clearTimeout(entry.timer);
    return this.entries.delete(name);
  }

  has(name: string): boolean {
    return this.entries.has(name);
  }

  get(name: string): Behavior<any, any> | undefined {
    return this.entries.get(name)?.behavior;
  }

  /** The behavior for a delivery; a one-shot behavior is removed as it is taken. */
  take(name: string): Behavior<any, any> | undefined {
    const entry = this.entries.get(name);
    if (!entry) return undefined;
    if (entry.once) this.remove(name);
    return entry.behavior;
  }

  names(): string[] {
    return [...this.entries.keys()];
  }

  get size(): number {
    return this.entries.size;
  }

  clear(): void {
    for (const name of [...this.entries.keys()]) this.remove(name);
  }
}

/**
 * For handlers that must not hold a mailbox slot while they wait (long polls, a cancel that
 * waits for a container to stop): answers the envelope when `work` settles, failures as the
 * kernel answers them. The behavior must be declared `noReply`.
 */
export function replyWhenDone<R>(ctx: BehaviorContext<unknown>, work: () => Promise<R>): void {
  void work().then(
    (result) => ctx.actor.reply(ctx.env, result ?? {}),
    (e: unknown) => ctx.actor.replyError(ctx.env, e, ctx.inbox),
  );
}

/** Behavior label of what is not one of the node's own behaviors. */
export const UNKNOWN_BEHAVIOR = '(unknown)';
/** Behavior label of every reply (their names are one-shot and random). */
export const REPLY_BEHAVIOR = '(reply)';

/** The bounded label of a behavior: its name, `(reply)` for a reply waiter, `(unknown)` for none. */
export function behaviorLabel(b: Behavior<any, any> | undefined): string {
  if (!b) return UNKNOWN_BEHAVIOR;
  return isReplyWaiter(b) ? REPLY_BEHAVIOR : b.name;
}
