/**
 * What the job, resource and device routes share: a REST request becomes an envelope to a
 * behavior of one of this node's actors, sent by the HTTP actor, so REST callers go through
 * exactly the behaviors other nodes and clients call.
 */
import type { H3Event } from 'h3';
import { z } from 'zod';
import { callBehavior, localHandle } from '../../behaviors/jobs/replies.js';
import { invalid } from '../../runtime/errors.js';
import type { HttpActor } from '../actor.js';
import { readBodyText } from '../body.js';

/** The reply goes back to the REST caller as it is: the behavior's schema already shaped it. */
const passThrough = z.unknown();

/** Invokes `be` on this node's actor at `inbox`; an error reply is thrown as its DmsError (so 404, 409…). */
export function callActor(http: HttpActor, inbox: string, be: string, payload: unknown, ttlMs?: number): Promise<unknown> {
  return callBehavior(http.actor, localHandle(http.actor, inbox), be, payload, passThrough, { ttlMs });
}

/** The request body as JSON; 400 when it is not. */
export async function readJson(event: H3Event, limit: number, what: string): Promise<unknown> {
  const text = await readBodyText(event, limit);
  try {
    return JSON.parse(text);
  } catch (e) {
    throw invalid(`${what}: the request body is not valid JSON (${(e as Error).message})`);
  }
}

/** A route's `:name` parameter. */
export function param(event: H3Event, name: string): string {
  const value = (event.context.params as Record<string, string> | undefined)?.[name];
  if (!value) throw invalid(`missing ${name} in the path`);
  try {
    return decodeURIComponent(value);
  } catch {
    // A malformed %-escape is the caller's mistake, not the node's.
    throw invalid(`${name} in the path is not valid percent-encoding`);
  }
}
