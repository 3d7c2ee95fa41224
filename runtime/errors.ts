/**
 * Every failure the node reports carries a kind; the HTTP layer maps kinds to status codes
 * and actors answer them as error replies (./error-reply.ts), so one throw site serves REST
 * and network callers. The one list of kinds: the type, the reply schema and the REST status
 * table all derive from it.
 */
export const ERROR_KINDS = [
  'invalid', // the caller sent something malformed: 400
  'unauthorized', // missing or bad REST credentials: 401
  'forbidden', // capability not granted: 403
  'not_found', // unknown actor, behavior or resource: 404
  'conflict', // the request contradicts current state (e.g. not enough resources): 409
  'timeout', // no reply before opt.exp: 408
  'too_large', // body or envelope over its limit: 413
  'rate_limited', // too many requests: 429
  'overloaded', // a bounded queue is full; retry later: 503
  'unavailable', // the node (or a part of it) is not running: 500
  'unroutable', // destination cannot be resolved or reached: 500
  'internal', // the node itself failed: 500
] as const;

export type ErrorKind = (typeof ERROR_KINDS)[number];

export const isErrorKind = (k: unknown): k is ErrorKind => (ERROR_KINDS as readonly unknown[]).includes(k);

export class DmsError extends Error {
  readonly kind: ErrorKind;
  /** Seconds the caller should wait before retrying, when the failure is transient. */
  readonly retryAfter?: number;

  constructor(kind: ErrorKind, message: string, opts: { cause?: unknown; retryAfter?: number } = {}) {
    super(message, opts.cause === undefined ? undefined : { cause: opts.cause });
    this.name = 'DmsError';
    this.kind = kind;
    this.retryAfter = opts.retryAfter;
  }
}

export const invalid = (message: string) => new DmsError('invalid', message);
export const notFound = (message: string) => new DmsError('not_found', message);

export function isDmsError(e: unknown): e is DmsError {
  return e instanceof DmsError;
}

/**
 * `text` in at most `max` characters: past that it is cut, saying how many characters went.
 * For words another node (or an executor) chose that this node stores, shows and passes on.
 */
export function cutText(text: string, max: number): string {
  if (text.length <= max) return text;
  let keep = Math.max(0, max - 40);
  // Not half of a surrogate pair.
  if (keep > 0 && /[\uD800-\uDBFF]/.test(text[keep - 1])) keep--;
  return `${text.slice(0, keep)}… (cut: ${text.length - keep} more characters)`;
}

/** A message safe to show a caller: DMS errors keep theirs, anything else is an internal failure. */
export function errorText(e: unknown): string {
  if (e instanceof DmsError) return e.message;
  if (e instanceof Error) return e.message;
  return String(e);
}
