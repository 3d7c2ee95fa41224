import type { H3Event } from 'h3';
import type { RestCaller } from './actor.js';
import { principalOf } from './auth.js';
import { fromBrowser } from './guard.js';
import { clientOf } from './limits.js';

/**
 * Who a request is from, for the HTTP actor: the role its credentials carry (with REST auth
 * off there is no principal, and the local caller, who owns the node, is admin), the client its
 * limits count against, and whether a browser sent it.
 */
export function restCaller(event: H3Event): RestCaller {
  return { role: principalOf(event)?.role ?? 'admin', client: clientOf(event).key, browser: fromBrowser(event) };
}
