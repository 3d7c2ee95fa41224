import type { H3Event, Middleware } from 'h3';
import { errors as joseErrors, jwtVerify } from 'jose';
import { DmsError } from '../runtime/errors.js';
import { isRole, type Role, ROLES } from '../runtime/api-keys.js';
import type { ApiKeyStore, Principal } from './apikeys.js';
import { errorBody, toWebResponse } from './errors.js';
import { crossOriginOf } from './guard.js';

/**
 * REST authentication: API keys (`X-API-Key`) and HS256 bearer JWTs, each optional, with three
 * roles. Off unless `auth.api_key_enabled` or `auth.jwt_secret` is set; `/health` stays open
 * so supervisors can probe without credentials.
 */

const OPEN_PATHS = new Set(['/health', '/api/v1/health']);

/** Paths answered without credentials even when REST auth is on (the OpenAPI document says so of them). */
export const isOpenPath = (path: string): boolean => OPEN_PATHS.has(path);

/**
 * The one spelling of a path that authorization judges: percent-decoded, lower case, without
 * empty or dot segments, without a trailing slash. The router may answer `/dev/`, `//dev` or
 * `/%64ev` as `/dev`; whatever it matches, the role check has seen the same path.
 */
export function canonicalPath(path: string): string {
  let decoded = path;
  try {
    decoded = decodeURIComponent(path);
  } catch {
    // Malformed escapes stay as they are: such a path names no route.
  }
  const segments: string[] = [];
  for (const s of decoded.toLowerCase().split('/')) {
    if (s === '' || s === '.') continue;
    if (s === '..') segments.pop();
    else segments.push(s);
  }
  return `/${segments.join('/')}`;
}

/** Under `prefix` in canonical form: the path itself or below it. */
const under = (c: string, prefix: string) => c === prefix || c.startsWith(`${prefix}/`);

/**
 * admin: everything. operator: reads, plus the actor interface, jobs and uploads for them. viewer: reads only.
 * The dev stream and page show every envelope in the clear, so they are admin-only even though they are GETs.
 */
export function roleAllows(role: Role, method: string, path: string): boolean {
  if (role === 'admin') return true;
  const c = canonicalPath(path);
  if (under(c, '/dev') || under(c, '/api/v1/dev')) return false;
  if (method === 'GET' || method === 'HEAD') return true;
  if (role !== 'operator') return false;
  return c.startsWith('/api/v1/actor/') || under(c, '/api/v1/jobs') || under(c, '/api/v1/blobs') || under(c, '/api/v1/pins') || under(c, '/api/v1/volumes');
}

// ---------------------------------------------------------------------------------------------
// Bearer JWTs, HS256 only (no algorithm the token names is trusted), `exp` required.

/** Verified tokens by their text until they expire: an HMAC per request is avoidable work. */
class JwtCache {
  private readonly entries = new Map<string, { principal: Principal | undefined; expMs: number }>();
  constructor(private readonly capacity = 10_000) {}

  get(token: string): { principal: Principal | undefined } | undefined {
    const hit = this.entries.get(token);
    if (!hit) return undefined;
    if (hit.expMs <= Date.now()) {
      this.entries.delete(token);
      return undefined;
    }
    return hit;
  }

  set(token: string, principal: Principal | undefined, expMs: number): void {
    if (this.entries.size >= this.capacity) this.entries.delete(this.entries.keys().next().value!);
    this.entries.set(token, { principal, expMs });
  }
}

export interface RestAuthOptions {
  apiKeys?: ApiKeyStore;
  jwtSecret?: string;
  /** Bounds on bearer JWTs beyond signature and expiry (config `auth.jwt_*`). */
  jwt?: JwtBounds;
}

export interface JwtBounds {
  /** Longest lifetime accepted: `exp` − `iat`, counting from now when `iat` is absent or ahead. */
  maxLifetimeS: number;
  /** When set, the `iss` a token must carry. */
  issuer?: string;
  /** When set, an `aud` a token must carry. */
  audience?: string;
}

const DEFAULT_JWT_BOUNDS: JwtBounds = { maxLifetimeS: 86_400 };

export const restAuthEnabled = (o: RestAuthOptions): boolean => Boolean(o.apiKeys || o.jwtSecret);

const unauthorized = (text: string) => new DmsError('unauthorized', text);

/** Authenticates a request; throws `unauthorized` (401) or `forbidden` (a token without a role). */
async function authenticate(event: H3Event, o: RestAuthOptions, jwts: JwtCache, secret?: Uint8Array): Promise<Principal> {
  const bounds = o.jwt ?? DEFAULT_JWT_BOUNDS;
  const apiKey = event.req.headers.get('x-api-key');
  const authz = event.req.headers.get('authorization');
  if (apiKey !== null) {
    if (!o.apiKeys) throw unauthorized('API keys are not enabled on this node; send Authorization: Bearer <JWT>');
    const p = o.apiKeys.verify(apiKey.trim());
    if (!p) throw unauthorized('invalid API key');
    return p;
  }
  if (authz !== null) {
    const m = /^Bearer\s+(\S+)\s*$/i.exec(authz);
    if (!m) throw unauthorized('Authorization must be "Bearer <JWT>"');
    if (!secret) throw unauthorized('bearer tokens are not enabled on this node; send X-API-Key');
    return verifyJwt(m[1], secret, jwts, bounds);
  }
  const how = [o.apiKeys ? 'X-API-Key' : '', secret ? 'Authorization: Bearer <JWT>' : ''].filter(Boolean).join(' or ');
  throw unauthorized(`missing credentials: send ${how}`);
}

async function verifyJwt(token: string, secret: Uint8Array, cache: JwtCache, bounds: JwtBounds): Promise<Principal> {
  const hit = cache.get(token);
  if (hit) {
    if (!hit.principal) throw new DmsError('forbidden', `bearer token carries no role (${ROLES.join(', ')})`);
    return hit.principal;
  }
  let payload;
  try {
    ({ payload } = await jwtVerify(token, secret, {
      algorithms: ['HS256'],
      requiredClaims: ['exp'],
      issuer: bounds.issuer || undefined,
      audience: bounds.audience || undefined,
    }));
  } catch (e) {
    // Never echo the token or jose's internals: say what is wrong in general terms.
    if (e instanceof joseErrors.JWTExpired) throw unauthorized('bearer token expired');
    if (e instanceof joseErrors.JWTClaimValidationFailed) throw unauthorized(`bearer token rejected: ${e.claim} claim invalid`);
    throw unauthorized('invalid bearer token');
  }
  // A token valid for years is a password that cannot be rotated: whoever mints one (or steals
  // the secret once) keeps access. An iat ahead of the clock would shorten the apparent
  // lifetime, so the lifetime counts from now at the latest.
  const now = Math.floor(Date.now() / 1000);
  const from = typeof payload.iat === 'number' ? Math.min(payload.iat, now) : now;
  const lifetime = Number(payload.exp) - from;
  if (lifetime > bounds.maxLifetimeS) {
    throw unauthorized(`bearer token lifetime of ${lifetime} s exceeds the ${bounds.maxLifetimeS} s this node accepts (auth.jwt_max_lifetime_s)`);
  }
  const principal: Principal | undefined = isRole(payload.role)
    ? { id: `jwt:${typeof payload.sub === 'string' ? payload.sub.slice(0, 128) : 'anonymous'}`, role: payload.role, via: 'jwt' }
    : undefined;
  cache.set(token, principal, Number(payload.exp) * 1000);
  if (!principal) throw new DmsError('forbidden', `bearer token carries no role (${ROLES.join(', ')})`);
  return principal;
}

/** Where the authenticated principal is kept for later middleware (rate limits). */
export const principalOf = (event: H3Event): Principal | undefined => event.context.principal as Principal | undefined;

/**
 * The auth middleware: 401 for missing or bad credentials, 403 for a role that may not make
 * the request. Off entirely when neither API keys nor JWTs are configured.
 */
export function restAuth(o: RestAuthOptions): Middleware {
  if (!restAuthEnabled(o)) return () => undefined;
  const secret = o.jwtSecret ? new TextEncoder().encode(o.jwtSecret) : undefined;
  const jwts = new JwtCache();
  const challenge = [o.apiKeys ? 'ApiKey header="X-API-Key"' : '', secret ? 'Bearer' : ''].filter(Boolean).join(', ');
  return async (event) => {
    const path = event.url.pathname;
    // A page's credentials are checked wherever it goes (crossOriginCredentials made it send some).
    if (isOpenPath(path) && crossOriginOf(event) === undefined) return undefined;
    try {
      const p = await authenticate(event, o, jwts, secret);
      if (!roleAllows(p.role, event.req.method, path)) {
        throw new DmsError('forbidden', `role ${p.role} may not ${event.req.method} ${path.length > 200 ? `${path.slice(0, 200)}…` : path}`);
      }
      event.context.principal = p;
      return undefined;
    } catch (e) {
      const body = errorBody(e);
      const res = toWebResponse(body);
      if (body.status === 401) res.headers.set('www-authenticate', challenge);
      return res;
    }
  };
}
