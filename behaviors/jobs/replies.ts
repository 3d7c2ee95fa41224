/**
 * How job, resource and device behaviors answer failures. The kernel replies `{"error": …}`,
 * which loses the error's kind; these behaviors reply `{"error": …, "kind": …}` instead, so a
 * caller on any node (and the REST routes, which must answer 404 or 409 rather than 500) can
 * tell an unknown job from a refused transition without parsing the text.
 */
import { z } from 'zod';
import type { Actor, Reply, SendOptions } from '../../runtime/actor.js';
import type { BehaviorContext } from '../../runtime/behavior.js';
import { DmsError, type ErrorKind } from '../../runtime/errors.js';
import type { Handle } from '../../runtime/wire/envelope.js';

const KINDS = [
  'invalid',
  'unauthorized',
  'forbidden',
  'not_found',
  'conflict',
  'timeout',
  'too_large',
  'rate_limited',
  'overloaded',
  'unavailable',
  'unroutable',
  'internal',
] as const satisfies readonly ErrorKind[];

// Strict: a failed Job also has a string `error`, and must not be mistaken for an error reply.
export const ErrorReplySchema = z.strictObject({
  error: z.string(),
  /** Absent when the kernel itself refused the envelope (unknown behavior, bad payload). */
  kind: z.enum(KINDS).optional(),
});
export type ErrorReply = z.output<typeof ErrorReplySchema>;

export const errorReply = (e: DmsError): ErrorReply => ({ error: e.message, kind: e.kind });

/**
 * Wraps a handler so a DmsError it throws becomes an ErrorReply. Anything else is a fault of
 * the node and is left to the kernel, which logs it and replies without a kind.
 */
export function replyingKinds<P, R>(handle: (ctx: BehaviorContext<P>) => R | Promise<R>) {
  return async (ctx: BehaviorContext<P>): Promise<R | ErrorReply> => {
    try {
      return await handle(ctx);
    } catch (e) {
      if (e instanceof DmsError) return errorReply(e);
      throw e;
    }
  };
}

/**
 * For handlers that must not hold a mailbox slot while they wait (long polls, a cancel that
 * waits for a container to stop): answers the envelope when `work` settles, errors included.
 * The behavior must be declared `noReply`.
 */
export function replyWhenDone<R>(ctx: BehaviorContext<unknown>, work: () => Promise<R>, onFault: (e: unknown) => void): void {
  void work().then(
    (result) => ctx.actor.reply(ctx.env, result ?? {}),
    (e: unknown) => {
      if (!(e instanceof DmsError)) onFault(e);
      const reply = e instanceof DmsError ? errorReply(e) : { error: 'internal error', kind: 'internal' as const };
      return ctx.actor.reply(ctx.env, reply);
    },
  );
}

/** The DmsError a reply stands for, or undefined when it is not an error reply. */
export function replyError(payload: unknown): DmsError | undefined {
  if (payload === null || typeof payload !== 'object' || !('error' in payload)) return undefined;
  const parsed = ErrorReplySchema.safeParse(payload);
  if (!parsed.success) return undefined;
  // A reply without a kind comes from the kernel refusing the envelope before any handler ran.
  return new DmsError(parsed.data.kind ?? 'internal', parsed.data.error);
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
  const error = replyError(reply.payload);
  if (error) throw error;
  const parsed = schema.safeParse(reply.payload);
  if (!parsed.success) throw new DmsError('internal', `reply to ${be} does not match its schema: ${parsed.error.message}`);
  return parsed.data;
}

const isLocal = (actor: Actor, to: Handle) => to.addr.host === '' || to.addr.host === actor.system.host;

/** The handle of an actor of this node, by inbox: what a local caller addresses. */
export const localHandle = (self: Actor, inbox: string): Handle => ({
  id: self.system.key.id,
  did: self.system.key.did,
  addr: { host: self.system.host, inbox },
});
