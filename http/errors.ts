import { DmsError, type ErrorKind } from '../runtime/errors.js';

const STATUS: Record<ErrorKind, number> = {
  invalid: 400,
  unauthorized: 401,
  forbidden: 403,
  not_found: 404,
  timeout: 408,
  conflict: 409,
  too_large: 413,
  rate_limited: 429,
  overloaded: 503,
  unavailable: 500,
  unroutable: 500,
  internal: 500,
};

export const statusFor = (kind: ErrorKind): number => STATUS[kind];

/** A JSON response body that is already text (lossless envelopes), with its status and headers. */
export class JsonBody {
  constructor(
    readonly text: string,
    readonly status = 200,
    readonly headers: Record<string, string> = {},
  ) {}
}

/** Every error body is `{"error": "<text>"}`; anything that is not a DmsError is the node's own failure. */
export function errorBody(e: unknown, onInternal?: (e: unknown) => void): JsonBody {
  if (e instanceof DmsError) {
    const headers: Record<string, string> = {};
    if (e.retryAfter !== undefined) headers['retry-after'] = String(e.retryAfter);
    return new JsonBody(JSON.stringify({ error: e.message }), statusFor(e.kind), headers);
  }
  onInternal?.(e);
  return new JsonBody(JSON.stringify({ error: 'internal error' }), 500);
}

export const toWebResponse = (b: JsonBody): Response =>
  new Response(b.text, { status: b.status, headers: { 'content-type': 'application/json; charset=utf-8', ...b.headers } });
