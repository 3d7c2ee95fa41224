/**
 * What a REST route declares about itself: its method, path, input schemas and answers. The
 * HTTP layer registers routes from these declarations and writes the OpenAPI document from
 * them (http/route-table.ts, http/openapi.ts); plugins declare their routes with the same
 * types (./plugin.ts), so they live here, below both.
 */
import type * as z from 'zod';

export type Method = 'GET' | 'POST' | 'PUT' | 'PATCH' | 'DELETE';

/** A `:name` of the path: the schema its value is checked with, and what it is in error texts (`invalid job id: …`). */
export interface ParamDoc<S extends z.ZodType = z.ZodType> {
  schema: S;
  what: string;
}

/** A JSON request body: its schema, and what it is in error texts (`invalid job spec: …`). */
export interface BodyDoc<S extends z.ZodType = z.ZodType> {
  schema: S;
  what: string;
  description?: string;
}

/** One answer of a route. */
export interface ResponseDoc {
  description: string;
  /** Its application/json body. An error status without one answers the shared `{"error"}` body (ErrorBody). */
  schema?: z.ZodType;
  /**
   * Bodies of other media types (text/event-stream, text/html): what they carry, and for a
   * stream of server-sent events the JSON `data` of each event type.
   */
  content?: Record<string, { description: string; events?: Record<string, z.ZodType> }>;
  headers?: Record<string, { description: string; schema: z.ZodType }>;
}

export type Params = Record<string, ParamDoc>;
export type Query = z.ZodType | undefined;
export type Body = BodyDoc | undefined;

/** What a route is, without its handler: what the OpenAPI document is written from. */
export interface RouteDoc<P extends Params = Params, Q extends Query = Query, B extends Body = Body> {
  method: Method;
  /** h3's form: `/api/v1/jobs/:id`. */
  path: string;
  /** Unique over the table: the name a generated client gives the call. */
  operationId: string;
  summary: string;
  description?: string;
  tags: string[];
  params?: P;
  /** The query parameters as one object schema: each it declares is given at most once (twice is a 400); others are ignored. */
  query?: Q;
  body?: B;
  responses: Record<number, ResponseDoc>;
}

/** A request's input, parsed on demand with the route's declared schemas; each failure is a 400 naming the problem. */
export interface RouteInput<P extends Params, Q extends Query, B extends Body> {
  param<K extends keyof P & string>(name: K): z.output<P[K]['schema']>;
  query(): Q extends z.ZodType ? z.output<Q> : never;
  body(): Promise<B extends BodyDoc ? z.output<B['schema']> : never>;
}
