/**
 * Request guards that keep web pages from driving the node. A page the operator visits can
 * send requests to 127.0.0.1 without any preflight (text/plain POSTs, forms), and with DNS
 * rebinding (its own name re-pointed at 127.0.0.1) it can read the answers too. These run
 * before authentication, limits and routes, so a refused request has no effect at all.
 *
 *   hostGuard      `Host` must name this node: loopback, `localhost`, `rest.addr` or
 *                  `rest.allowed_hosts` (403). Defeats DNS rebinding, whose requests carry
 *                  the attacker's name.
 *   originGuard    a request with an `Origin` other than the node's own (same-origin: the
 *                  scheme, `Host` and port it was sent to) must name one of `rest.cors.origins`,
 *                  exactly (403), preflights included: CORS headers alone only hide answers,
 *                  they never stop a request that needs no preflight.
 *   crossSiteGuard a request a browser made for a page of another site without CORS (no `Origin`:
 *                  an image, a frame, a script, a no-cors fetch, a link) is refused (403): its
 *                  answer stays hidden from the page, but the request itself still acts (a dev
 *                  stream watcher's slot held, a stream's events built for nobody).
 *   crossOriginCredentials  a cross-origin request from a listed origin must carry an API key
 *                  or JWT, and REST auth must be on to check it (403): a listing lets a page
 *                  use its user's credentials, never the operator's reach without any.
 *   jsonBodyGuard  a body must be `Content-Type: application/json` (415), and not compressed
 *                  (`Content-Encoding`, 415). Browsers send JSON
 *                  cross-origin only after a preflight, which originGuard refuses unless the
 *                  origin is listed (and then credentials are required).
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

/** Whether an `Origin` is one of `origins`: exactly (after normalOrigin), or any with `*`. */
export function originMatcher(origins: readonly string[]): (origin: string) => boolean {
  const any = origins.includes('*');
  const allowed = new Set(origins.map(normalOrigin));
  return (origin) => any || allowed.has(normalOrigin(origin));
}

/** A `Host` value that is a name or address and an optional port, nothing a URL would read as more (`user@`, a path). */
const PLAIN_HOST = /^(?:[a-z0-9.-]+|\[[0-9a-f:.]+\])(?::\d{1,5})?$/i;

/** The origin a request was sent to: its scheme and its `Host`. Undefined for a Host no URL can be made of. */
function ownOrigin(event: H3Event, scheme: 'http' | 'https'): string | undefined {
  const host = (event.req.headers.get('host') ?? event.url.host).trim();
  if (!PLAIN_HOST.test(host)) return undefined;
  try {
    return new URL(`${scheme}://${host}`).origin;
  } catch {
    return undefined;
  }
}

/** The `Origin` of a cross-origin request originGuard let through, for crossOriginCredentials and restAuth. */
export const crossOriginOf = (event: H3Event): string | undefined => event.context.crossOrigin as string | undefined;

export function originGuard(origins: readonly string[], tls: boolean): Middleware {
  const allowed = originMatcher(origins);
  const scheme = tls ? 'https' : 'http';
  return (event) => {
    const origin = event.req.headers.get('origin');
    if (origin === null) return undefined;
    // The node's own pages (/dev): hostGuard already holds Host to this node's names.
    if (normalOrigin(origin) === ownOrigin(event, scheme)) return undefined;
    if (!allowed(origin)) return refuse(403, `origin ${shown(origin)} is not in rest.cors.origins`);
    event.context.crossOrigin = origin;
    return undefined;
  };
}

/**
 * `Sec-Fetch-Site` says whose page made the request; a page cannot remove or change it. Sent
 * with `Origin`, originGuard judges the origin instead; sent without, the request is a page's
 * subresource or navigation, which no route here serves another site. `same-site` counts as
 * another site: a site ignores the port, and a page on localhost:3000 is not this node's.
 */
export function crossSiteGuard(): Middleware {
  return (event) => {
    const h = event.req.headers;
    if (h.get('origin') !== null) return undefined;
    const site = h.get('sec-fetch-site')?.trim().toLowerCase();
    if (site !== 'cross-site' && site !== 'same-site') return undefined;
    return refuse(403, `a request made by a page of another site is not served (Sec-Fetch-Site: ${site}): open the node's address directly, or use the dms CLI`);
  };
}

/**
 * Runs after CORS preflights are answered (they never carry credentials) and before restAuth,
 * which then checks the credentials, on open paths too.
 */
export function crossOriginCredentials(authEnabled: boolean): Middleware {
  return (event) => {
    const origin = crossOriginOf(event);
    if (origin === undefined) return undefined;
    const needs = `origin ${shown(origin)}: a cross-origin request needs an API key or JWT`;
    if (!authEnabled) return refuse(403, `${needs}, and REST auth is off on this node (auth.api_key_enabled, auth.jwt_secret)`);
    const h = event.req.headers;
    if (h.get('x-api-key') === null && h.get('authorization') === null) return refuse(403, needs);
    return undefined;
  };
}

const NO_BODY_METHODS = new Set(['GET', 'HEAD', 'OPTIONS']);

/** Whether the request carries a body (or announces one): a length above zero, or a chunked transfer. */
function hasBody(event: H3Event): boolean {
  const h = event.req.headers;
  const length = h.get('content-length');
  return (length !== null && length.trim() !== '0') || h.get('transfer-encoding') !== null;
}

/** The one route that takes a body other than JSON (http/routes/outputs.ts). */
const UPLOAD_PATH = '/api/v1/blobs';
const UPLOAD_TYPES = new Set(['application/x-tar', 'application/octet-stream']);

export function jsonBodyGuard(): Middleware {
  return (event) => {
    if (NO_BODY_METHODS.has(event.req.method)) return undefined;
    // Nothing here decodes a compressed body: read as it came, gzip was "not valid JSON", and an
    // upload stored the compressed bytes without a word.
    const encoding = event.req.headers.get('content-encoding');
    if (encoding !== null && encoding.trim().toLowerCase() !== 'identity') return refuse(415, `Content-Encoding ${shown(encoding)} is not accepted: send the body uncompressed`);
    // node:http takes the chunks off a `gzip, chunked` body and hands on what is left, compressed.
    const transfer = event.req.headers.get('transfer-encoding');
    if (transfer !== null && transfer.trim().toLowerCase() !== 'chunked') return refuse(415, `Transfer-Encoding ${shown(transfer)} is not accepted: send the body uncompressed, chunked or with a Content-Length`);
    const type = event.req.headers.get('content-type');
    const media = (type ?? '').split(';')[0].trim().toLowerCase();
    // Uploads carry bytes, and only as one of these types (neither is one a page may send
    // cross-origin without a preflight): JSON, or no type, is refused here as any other is.
    const upload = event.url.pathname === UPLOAD_PATH;
    if (upload ? UPLOAD_TYPES.has(media) : media === 'application/json') return undefined;
    // A declared type is checked even on an empty body: nothing else takes anything but JSON.
    if (!upload && type === null && !hasBody(event)) return undefined;
    const wanted = upload ? 'application/x-tar (a directory) or application/octet-stream (a file)' : 'application/json';
    return refuse(415, `Content-Type must be ${wanted}, got ${type === null ? 'none' : shown(type)}`);
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
  /** The node serves HTTPS: its own origin's scheme. */
  tls: boolean;
}

/** The guards in the order they run: who is addressed, who is asking, what they send. */
export const requestGuards = (o: GuardOptions): Middleware[] => [hostGuard(o.addr, o.allowedHosts), originGuard(o.origins, o.tls), crossSiteGuard(), jsonBodyGuard()];
