/**
 * The one error protocol of actors: a behavior that fails answers `{"error": <text>, "kind":
 * <kind>}`. The kernel makes these replies itself (runtime/actor.ts, runtime/system.ts) from
 * the DmsError a handler throws, so behaviors just throw; callers turn them back into
 * exceptions with `parseErrorReply` (the client's decoder, `Actor.call` inside the node).
 */
import { z } from 'zod';
import { DmsError, type ErrorKind, isErrorKind } from './errors.js';

/**
 * Strict: a failed Job record also has a string `error` (beside its other fields) and must not
 * be mistaken for an error reply. `kind` is any string rather than one of ERROR_KINDS, so a
 * kind only a newer node knows still marks the reply as an error instead of passing it off as
 * a result; it is absent in replies from nodes that predate kinds.
 */
export const ErrorReplySchema = z.strictObject({
  error: z.string(),
  kind: z.string().optional(),
});
export type ErrorReply = z.output<typeof ErrorReplySchema>;

export const errorReply = (e: DmsError): ErrorReply => ({ error: e.message, kind: e.kind });

/** The payload as an error reply, or undefined when it is an ordinary result. */
export function parseErrorReply(payload: unknown): ErrorReply | undefined {
  // Cheap test first: nearly every payload is a result, and most have no `error` at all.
  if (payload === null || typeof payload !== 'object' || !('error' in payload)) return undefined;
  const parsed = ErrorReplySchema.safeParse(payload);
  return parsed.success ? parsed.data : undefined;
}

/** The reply's kind as this node knows it: one it does not know (or none) counts as internal. */
export const replyKind = (reply: ErrorReply): ErrorKind => (isErrorKind(reply.kind) ? reply.kind : 'internal');

/** The DmsError an error reply stands for, so REST answers with the status of its kind. */
export const replyToError = (reply: ErrorReply): DmsError => new DmsError(replyKind(reply), reply.error);
