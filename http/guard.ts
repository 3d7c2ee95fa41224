/**
 * Request guards that keep web pages from driving the node. A page the operator visits can
 * send requests to 127.0.0.1 without any preflight (text/plain POSTs, forms), and with DNS
 * rebinding (its own name re-pointed at 127.0.0.1) it can read the answers too. These run
 * before authentication, limits and routes, so a refused request has no effect at all.
 *
 *   hostGuard      `Host` must name this node: loopback, `localhost`, `rest.addr` or
 *                  `rest.allowed_hosts` (403). Defeats DNS rebinding, whose requests carry
 *                  the attacker's name.
 *   originGuard    a request with an `Origin` outside `rest.cors.origins` is refused (403),
 *                  preflights included: CORS headers alone only hide answers, they never
 *                  stop a request that needs no preflight.
 *   jsonBodyGuard  a body must be `Content-Type: application/json` (415). Browsers send JSON
 *                  cross-origin only after a preflight, which originGuard refuses.
 *
 * `fromBrowser` tells the HTTP actor that a browser sent the request, so it never signs an
 * unsigned envelope as the operator for a page.
 */
import type { H3Event, Middleware } from 'h3';
import { isLoopback } from '../runtime/config.js';
import { errorJson, JsonBody, toWebResponse } from './errors.js';

const refuse = (status: number, error: string) => toWebResponse(new JsonBody(errorJson(error), status));

/** Caller-supplied text in an error message: bounded, so a refusal never echoes a whole header. */
const shown = (text: string) => (text.length > 100 ? `${text.slice(0, 100)}…` : text);

/** The host name of a `Host` header value: without port, without IPv6 brackets, lower case, no trailing dot. */
export function hostName(header: string): string {
  let h = header.trim().toLowerCase();
  if (h.startsWith('[')) {
    const end = h.indexOf(']');
    h = end < 0 ? h.slice(1) : h.slice(1, end);
  } else if (h.indexOf(':') === h.lastIndexOf(':')) {
    // One colon at most: name:port. More than one is a bare IPv6 address (not valid in Host), kept whole.
    const colon = h.indexOf(':');
    if (colon >= 0) h = h.slice(0, colon);
  }
  return h.endsWith('.') ? h.slice(0, -1) : h;
}

export function hostGuard(addr: string, allowedHosts: readonly string[]): Middleware {
  const allowed = new Set([hostName(addr), ...allowedHosts.map(hostName)]);
  return (event) => {
    // Browsers always send Host; a request without one (HTTP/1.0, an in-process fetch) is
    // checked by the host its URL was resolved to.
    const header = event.req.headers.get('host') ?? event.url.host;
    if (header.trim() === '') return refuse(403, 'a Host header is required');
    const host = hostName(header);
    if (isLoopback(host) || allowed.has(host)) return undefined;
    return refuse(403, `host ${shown(host)} is not allowed: use a loopback address, localhost or ${addr}, or add it to rest.allowed_hosts`);
  };
}

/** An origin as browsers serialize it (lower-case scheme and host, no path), for comparison. */
const normalOrigin = (o: string) => o.trim().toLowerCase().replace(/\/+$/, '');

export function originGuard(origins: readonly string[]): Middleware {
  const any = origins.includes('*');
  const allowed = new Set(origins.map(normalOrigin));
  return (event) => {
    const origin = event.req.headers.get('origin');
    if (origin === null || any || allowed.has(normalOrigin(origin))) return undefined;
    return refuse(403, `origin ${shown(origin)} is not allowed (rest.cors.origins)`);
  };
}

const NO_BODY_METHODS = new Set(['GET', 'HEAD', 'OPTIONS']);

/** Whether the request carries a body (or announces one): a length above zero, or a chunked transfer. */
function hasBody(event: H3Event): boolean {
  const h = event.req.headers;
  const length = h.get('content-length');
  return (length !== null && length.trim() !== '0') || h.get('transfer-encoding') !== null;
}

export function jsonBodyGuard(): Middleware {
  return (event) => {
    if (NO_BODY_METHODS.has(event.req.method)) return undefined;
    const type = event.req.headers.get('content-type');
    // A declared type is checked even on an empty body: nothing here takes anything but JSON.
    if (type === null && !hasBody(event)) return undefined;
    const media = (type ?? '').split(';')[0].trim().toLowerCase();
    if (media === 'application/json') return undefined;
    return refuse(415, `Content-Type must be application/json, got ${type === null ? 'none' : shown(type)}`);
  };
}

/**
 * Whether a browser sent the request. Browsers add `Origin` (cross-origin requests and every
 * POST) and `Sec-Fetch-Site`/`Sec-Fetch-Dest` (to trustworthy origins, which include loopback),
 * and a page cannot remove them. Node's own fetch sends `Sec-Fetch-Mode: cors` and nothing else,
 * so that header alone does not count: local scripts keep working.
 */
export function fromBrowser(event: H3Event): boolean {
  const h = event.req.headers;
  if (h.get('origin') !== null || h.get('sec-fetch-site') !== null || h.get('sec-fetch-dest') !== null) return true;
  const mode = h.get('sec-fetch-mode');
  return mode !== null && mode.trim().toLowerCase() !== 'cors';
}

export interface GuardOptions {
  addr: string;
  allowedHosts: readonly string[];
  origins: readonly string[];
}

/** The guards in the order they run: who is addressed, who is asking, what they send. */
export const requestGuards = (o: GuardOptions): Middleware[] => [hostGuard(o.addr, o.allowedHosts), originGuard(o.origins), jsonBodyGuard()];
