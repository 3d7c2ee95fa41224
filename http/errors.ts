import { randomBytes } from 'node:crypto';
import * as z from 'zod';
import { DmsError, type ErrorKind } from '../runtime/errors.js';

/** Every REST error body: the OpenAPI document's one error schema (the REST status says the kind). */
export const ErrorBody = z.object({ error: z.string() }).meta({ title: 'Error', description: 'What went wrong, for a person' });
export type ErrorBody = z.output<typeof ErrorBody>;

/** An error body as text: what every refusal of a REST request answers. */
export const errorJson = (error: string): string => JSON.stringify({ error } satisfies ErrorBody);

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

/** A short random id tying an "internal error" answer to its log line. */
export const errorId = (): string => randomBytes(4).toString('hex');

/** The body of an internal failure: the caller gets an id to quote, never the raw message. */
export const internalErrorBody = (id: string): JsonBody => new JsonBody(errorJson(`internal error (id ${id})`), 500);

/**
 * Every error body is `{"error": "<text>"}`. A DmsError says what the caller did or what the
 * node refused; anything else (and a DmsError of kind `internal`) is the node's own failure,
 * whose text may name paths or internals: `onInternal` logs it under the id the caller sees.
 */
export function errorBody(e: unknown, onInternal?: (e: unknown, id: string) => void): JsonBody {
  if (e instanceof DmsError && e.kind !== 'internal') {
    const headers: Record<string, string> = {};
    if (e.retryAfter !== undefined) headers['retry-after'] = String(e.retryAfter);
    return new JsonBody(errorJson(e.message), statusFor(e.kind), headers);
  }
  const id = errorId();
  onInternal?.(e, id);
  return internalErrorBody(id);
}

export const toWebResponse = (b: JsonBody): Response =>
  new Response(b.text, { status: b.status, headers: { 'content-type': 'application/json; charset=utf-8', ...b.headers } });
