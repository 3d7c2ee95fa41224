/**
 * The REST routes with their documentation. A route module adds each route here, never to the
 * h3 app directly: its method, path, summary, the schemas its path parameters, query and body
 * are checked with, and its answers by status, together with its handler. The table registers
 * the handler on the app and keeps the list, from which http/openapi.ts writes the OpenAPI
 * document, so the document lists every route and describes each with the very schemas that
 * check its requests. Handlers read their input through `input` (below), which parses with
 * the declared schemas: documentation and validation are one declaration.
 */
import type { H3, H3Event } from 'h3';
import type * as z from 'zod';
import { parseWith } from '../runtime/issues.js';
import { invalid, isDmsError } from '../runtime/errors.js';
import { parseUntrustedJson } from '../runtime/json.js';
import type { Logger } from '../runtime/log.js';
import { readBodyText } from './body.js';
import { route } from './handler.js';
import { parseQuery } from './query.js';
import type { Body, BodyDoc, ParamDoc, Params, Query, RouteDoc, RouteInput } from '../behaviors/route-docs.js';

export type { BodyDoc, Method, ParamDoc, ResponseDoc, RouteDoc, RouteInput } from '../behaviors/route-docs.js';

export interface RouteDef<P extends Params, Q extends Query, B extends Body> extends RouteDoc<P, Q, B> {
  /**
   * What it answers goes through `route()`: a value is sent as JSON, an error as `{"error"}`
   * with its status; a Response or an h3 response (a stream of server-sent events) as it is.
   */
  handler: (event: H3Event, input: RouteInput<P, Q, B>) => unknown;
}

/** The request body as JSON; 400 when it is not. */
async function readJson(event: H3Event, limit: number, what: string): Promise<unknown> {
  const text = await readBodyText(event, limit);
  try {
    return parseUntrustedJson(text, 'the request body');
  } catch (e) {
    if (isDmsError(e)) throw invalid(`${what}: ${e.message}`);
    throw invalid(`${what}: the request body is not valid JSON (${(e as Error).message})`);
  }
}

/** A route's `:name` parameter, percent-decoded. */
function param(event: H3Event, name: string): string {
  const value = (event.context.params as Record<string, string> | undefined)?.[name];
  if (!value) throw invalid(`missing ${name} in the path`);
  try {
    return decodeURIComponent(value);
  } catch {
    // A malformed %-escape is the caller's mistake, not the node's failure.
    throw invalid(`${name} in the path is not valid percent-encoding`);
  }
}

const pathParams = (path: string): string[] => [...path.matchAll(/:(\w+)/g)].map((m) => m[1]);

/** A route path's segments against a request path's, as the router matches them: a `:name` is any segment but an empty one. */
function pathMatches(route: string, pathname: string): boolean {
  // The router takes `/a/` for `/a`.
  const path = pathname.length > 1 && pathname.endsWith('/') ? pathname.slice(0, -1) : pathname;
  const want = route.split('/');
  const got = path.split('/');
  return want.length === got.length && want.every((seg, i) => (seg.startsWith(':') ? got[i] !== '' : seg === got[i]));
}

export class RouteTable {
  readonly #routes: RouteDoc[] = [];

  constructor(
    private readonly app: H3,
    private readonly log: Logger,
    /** Largest request body (rest.body_limit): 413 above it. */
    private readonly bodyLimit: number,
  ) {
  }

  /** Every route added, in order. */
  get routes(): readonly RouteDoc[] {
    return this.#routes;
  }

  add<P extends Params = Record<never, ParamDoc>, Q extends Query = undefined, B extends Body = undefined>(def: RouteDef<P, Q, B>): void {
    const { handler, ...doc } = def;
    const where = `${doc.method} ${doc.path}`;
    const declared = Object.keys(doc.params ?? {}).sort().join(',');
    if (pathParams(doc.path).sort().join(',') !== declared) throw new Error(`${where}: params must declare exactly the path's :names`);
    if (this.#routes.some((r) => r.method === doc.method && r.path === doc.path)) throw new Error(`${where} is added twice`);
    if (this.#routes.some((r) => r.operationId === doc.operationId)) throw new Error(`${where}: operationId ${doc.operationId} is taken`);

    const input = (event: H3Event): RouteInput<P, Q, B> => ({
      param: <K extends keyof P & string>(name: K) => {
        const p: P[K] = doc.params![name];
        return parseWith(p.schema as P[K]['schema'], param(event, name), p.what);
      },
      query: () => parseQuery(doc.query!, event) as never,
      body: async () => parseWith(doc.body!.schema, await readJson(event, this.bodyLimit, doc.body!.what), doc.body!.what) as never,
    });
    this.app.on(doc.method, doc.path, route(this.log, (event) => handler(event, input(event))));
    this.#routes.push(doc as RouteDoc);
  }

  /**
   * The methods routes have at a request path, sorted (HEAD wherever GET is: the router answers
   * it with GET's route); none when no route has the path. What a 405's `Allow` lists: the
   * router alone says 404 for a path that exists under another method.
   */
  methodsAt(pathname: string): string[] {
    const methods = new Set<string>();
    for (const r of this.#routes) {
      if (!pathMatches(r.path, pathname)) continue;
      methods.add(r.method);
      if (r.method === 'GET') methods.add('HEAD');
    }
    return [...methods].sort();
  }
}
