import { parseErrorReply, replyKind } from '../runtime/error-reply.js';
import type { ErrorKind } from '../runtime/errors.js';
import type { Envelope } from '../runtime/wire/envelope.js';

/**
 * Why a call failed, so callers can react without parsing messages:
 * - `unreachable`: no HTTP answer at all (node not running, wrong URL, connection refused);
 * - `timeout`: the node answered 408 (no reply before `opt.exp`) or the HTTP deadline passed;
 * - `aborted`: the caller's AbortSignal fired;
 * - `http`: the node refused the request (4xx/5xx other than 408), `status` and `nodeError` say why;
 * - `reply`: the request went through but the replying actor answered an error reply
 *   `{"error": ..., "kind": ...}`; `replyKind` is its kind;
 * - `protocol`: the node answered something that is not what the REST contract promises.
 */
export type ClientErrorKind = 'unreachable' | 'timeout' | 'aborted' | 'http' | 'reply' | 'protocol';

export interface ClientErrorInit {
  kind: ClientErrorKind;
  message: string;
  url: string;
  /** HTTP status of the node's answer; 0 when there was none. */
  status?: number;
  /** The node's (or replying actor's) own error text, verbatim. */
  nodeError?: string;
  /** The reply envelope, for `reply` errors. */
  reply?: Envelope;
  /** The replying node's kind of failure, for `reply` errors (`internal` when it gave none). */
  replyKind?: ErrorKind;
  cause?: unknown;
}

export class ClientError extends Error {
  readonly kind: ClientErrorKind;
  readonly status: number;
  readonly url: string;
  readonly nodeError?: string;
  readonly reply?: Envelope;
  readonly replyKind?: ErrorKind;

  constructor(init: ClientErrorInit) {
    super(init.message, init.cause === undefined ? undefined : { cause: init.cause });
    this.name = 'ClientError';
    this.kind = init.kind;
    this.status = init.status ?? 0;
    this.url = init.url;
    this.nodeError = init.nodeError;
    this.reply = init.reply;
    this.replyKind = init.replyKind;
  }
}

export const isClientError = (e: unknown): e is ClientError => e instanceof ClientError;

/**
 * The client's one decoder of error replies (runtime/error-reply.ts): the ClientError of kind
 * `reply` that `payload` stands for, or undefined when it is an ordinary result. Callers that
 * want an exception throw it; a broadcast keeps it beside the other peers' replies.
 */
export function decodeErrorReply(payload: unknown, at: { url: string; reply?: Envelope }): ClientError | undefined {
  const reply = parseErrorReply(payload);
  if (!reply) return undefined;
  return new ClientError({ kind: 'reply', url: at.url, status: 200, reply: at.reply, nodeError: reply.error, replyKind: replyKind(reply), message: reply.error });
}
