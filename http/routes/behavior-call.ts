/**
 * What the job, resource and device routes share to read a request. Each request then becomes
 * an envelope to a behavior of one of this node's actors, sent by the HTTP actor (its `call`),
 * so REST callers go through exactly the behaviors other nodes and clients call.
 */
import type { H3Event } from 'h3';
import { invalid } from '../../runtime/errors.js';
import { readBodyText } from '../body.js';

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
    // A malformed %-escape is the caller's mistake, not the node's failure.
    throw invalid(`${name} in the path is not valid percent-encoding`);
  }
}
