/**
 * How job, resource and device behaviors call each other and answer late. Failures need
 * nothing here: a handler throws a DmsError and the kernel replies `{"error", "kind"}`
 * (runtime/error-reply.ts), so a caller on any node (and the REST routes, which must answer
 * 404 or 409 rather than 500) can tell an unknown job from a refused transition.
 */
import { setImmediate as nextTurn } from 'node:timers/promises';
import type { z } from 'zod';
import type { Actor, SendOptions } from '../../runtime/actor.js';
import type { BehaviorContext } from '../../runtime/behavior.js';
import { parseErrorReply, replyToError } from '../../runtime/error-reply.js';
import { DmsError } from '../../runtime/errors.js';
import type { Handle } from '../../runtime/wire/envelope.js';

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

/**
 * Invokes `be` on `to` from `actor` and returns the reply's payload checked against `schema`;
 * an error reply is thrown as the DmsError it describes.
 */
export async function callBehavior<S extends z.ZodType>(
  actor: Actor,
  to: Handle,
  be: string,
  payload: unknown,
  schema: S,
  opts: SendOptions = {},
): Promise<z.output<S>> {
  // A job's trip through this node's actors need not pay for a signature on every hop.
  const reply = await actor.invoke<unknown>(to, be, payload, { ...opts, unsigned: isLocal(actor, to) });
  const error = parseErrorReply(reply.payload);
  if (error) throw replyToError(error);
  const parsed = schema.safeParse(reply.payload);
  if (!parsed.success) throw new DmsError('internal', `reply to ${be} does not match its schema: ${parsed.error.message}`);
  return parsed.data;
}

/**
 * Sends `be` to `to` without waiting for an answer (notifications, fire-and-forget requests);
 * unsigned when it stays on this node. Resolves once the envelope is routed.
 */
export function tell(actor: Actor, to: Handle, be: string, payload: unknown, opts: SendOptions = {}): Promise<void> {
  return actor.send(to, be, payload, { ...opts, unsigned: isLocal(actor, to) });
}

const isLocal = (actor: Actor, to: Handle) => actor.system.isHere(to.addr.host);

/** The handle of actor `inbox` on node `host` (a peer id): what a caller on another node addresses. */
export const handleAt = (host: string, inbox: string): Handle => ({ id: '', did: '', addr: { host, inbox } });

/** The handle of an actor of this node, by inbox: what a local caller addresses. */
export const localHandle = (self: Actor, inbox: string): Handle => ({
  id: self.system.key.id,
  did: self.system.key.did,
  addr: { host: self.system.host, inbox },
});

/**
 * Sends what is handed to it together: the first item waits one turn of the event loop, and
 * whatever comes while a send is in flight goes in the next one. Many jobs move at once, and a
 * job's trip through the node's actors is paid for per envelope, not per item.
 */
export class Batcher<T> {
  private queue: T[] = [];
  /** Settles once the items now queued are sent. */
  private round: { sent: Promise<void>; resolve(): void; reject(e: unknown): void } | null = null;
  private running: Promise<void> | null = null;

  constructor(
    /** Sends one batch; a rejection is given to every item of the round. */
    private readonly send: (items: T[]) => Promise<unknown>,
    /** Most items one envelope carries. */
    private readonly max: number,
  ) {}

  /** Resolves once the batch carrying `item` is sent; the caller handles a failure. */
  add(item: T): Promise<void> {
    this.queue.push(item);
    if (!this.round) {
      let resolve!: () => void;
      let reject!: (e: unknown) => void;
      const sent = new Promise<void>((res, rej) => ((resolve = res), (reject = rej)));
      this.round = { sent, resolve, reject };
    }
    this.running ??= this.run();
    return this.round.sent;
  }

  /** Resolves once everything added so far is sent. */
  async drain(): Promise<void> {
    while (this.running) await this.running;
  }

  private async run(): Promise<void> {
    await nextTurn();
    while (this.round) {
      const { resolve, reject } = this.round;
      const items = this.queue;
      this.queue = [];
      this.round = null;
      try {
        for (let i = 0; i < items.length; i += this.max) await this.send(items.slice(i, i + this.max));
        resolve();
      } catch (e) {
        reject(e);
      }
    }
    this.running = null;
  }
}
