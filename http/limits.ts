import { getRequestIP, type H3Event, type Middleware } from 'h3';
import { isLoopback } from '../runtime/config.js';
import { DmsError } from '../runtime/errors.js';
import { hostPrefix } from '../runtime/network/host-prefix.js';
import { RateLimiter } from '../runtime/rate-limiter.js';
import { isOpenPath, principalOf } from './auth.js';
import { errorBody, toWebResponse } from './errors.js';

/**
 * Per-client limits: a token bucket on requests to every route that takes credentials (the
 * actor interface, jobs, resources, device, plugins' routes: all but the open health probes),
 * 429 with Retry-After; and a cap on invokes/broadcasts one client has waiting (429), so one
 * client can neither flood the node nor hold every pending slot (`rest.max_pending` bounds them all, 503).
 */

export interface LimitOptions {
  perSecond: number;
  burst: number;
  /** Throttle loopback clients too (the pending cap applies to them regardless). */
  loopback: boolean;
  maxPendingPerClient: number;
}

const WAITING = new Set(['/api/v1/actor/invoke', '/api/v1/actor/broadcast']);

/** The client a request counts against: its authenticated principal, else its address. */
export function clientOf(event: H3Event): { key: string; loopback: boolean } {
  return clientFrom(getRequestIP(event), principalOf(event)?.id);
}

/**
 * An address counts as its host's prefix (an IPv4 address, an IPv6 /64): keyed by the whole
 * IPv6 address, one host could give each request an address of its own and never be limited.
 */
export function clientFrom(ip: string | undefined, principal: string | undefined): { key: string; loopback: boolean } {
  const plain = ip === undefined ? 'unknown' : ip.startsWith('::ffff:') ? ip.slice(7) : ip;
  return { key: principal ?? `ip:${(ip !== undefined && hostPrefix(ip)) || plain}`, loopback: isLoopback(plain) };
}

const refuse = (text: string, retryAfter: number) => toWebResponse(errorBody(new DmsError('rate_limited', text, { retryAfter })));

export function actorLimits(o: LimitOptions): Middleware {
  const limiter = o.perSecond > 0 ? new RateLimiter(o.perSecond, o.burst) : undefined;
  const waiting = new Map<string, number>();
  return async (event, next) => {
    const path = event.url.pathname;
    // The probes a supervisor polls stay open, as they are to REST auth.
    if (isOpenPath(path)) return undefined;
    const client = clientOf(event);
    // The local operator is not throttled unless asked; the pending cap applies to everyone,
    // since a loopback caller may be a page or process the operator did not start.
    if (limiter && !(client.loopback && !o.loopback)) {
      const wait = limiter.take(client.key);
      if (wait) return refuse(`rate limit: at most ${o.perSecond} requests per second (burst ${o.burst}) to this node's REST interface; retry in ${wait} s`, wait);
    }
    if (!WAITING.has(path)) return undefined;
    const n = waiting.get(client.key) ?? 0;
    if (n >= o.maxPendingPerClient) return refuse(`too many requests of yours waiting for replies (${o.maxPendingPerClient}); retry later`, 1);
    waiting.set(client.key, n + 1);
    try {
      return await next();
    } finally {
      const left = (waiting.get(client.key) ?? 1) - 1;
      if (left > 0) waiting.set(client.key, left);
      else waiting.delete(client.key);
    }
  };
}
