import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';
import { chmodSync, existsSync, mkdirSync, readFileSync, renameSync, unwatchFile, watchFile, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import type { H3Event, Middleware } from 'h3';
import { errors as joseErrors, jwtVerify } from 'jose';
import * as z from 'zod';
import { DmsError } from '../runtime/errors.js';
import type { Logger } from '../runtime/log.js';
import { errorBody, toWebResponse } from './errors.js';

/**
 * REST authentication: API keys (`X-API-Key`) and HS256 bearer JWTs, each optional, with three
 * roles. Off unless `auth.api_key_enabled` or `auth.jwt_secret` is set; `/health` stays open
 * so supervisors can probe without credentials.
 */

export const ROLES = ['admin', 'operator', 'viewer'] as const;
export type Role = (typeof ROLES)[number];
export const isRole = (x: unknown): x is Role => ROLES.includes(x as Role);

/** Who a request is from, once authenticated. `id` names them for rate limits and logs; it is never a secret. */
export interface Principal {
  id: string;
  role: Role;
  via: 'api-key' | 'jwt';
}

const OPEN_PATHS = new Set(['/health', '/api/v1/health']);

/**
 * admin: everything. operator: reads, plus the actor interface and jobs. viewer: reads only.
 * Dev streams show every envelope in the clear, so they are admin-only even though they are GETs.
 */
export function roleAllows(role: Role, method: string, path: string): boolean {
  if (role === 'admin') return true;
  if (path.startsWith('/api/v1/dev/')) return false;
  if (method === 'GET' || method === 'HEAD') return true;
  if (role !== 'operator') return false;
  return path.startsWith('/api/v1/actor/') || path === '/api/v1/jobs' || path.startsWith('/api/v1/jobs/');
}

// ---------------------------------------------------------------------------------------------
// API keys: `dms_<id>_<secret>`. The home keeps the id, role and a SHA-256 of the whole key; the
// key itself is shown once, at creation. Keys are 256-bit random, so a fast hash is enough:
// nobody can guess a preimage, and checking costs one hash per request.

export const API_KEYS_FILE = 'apikeys.json';
export const apiKeysPath = (home: string): string => join(home, API_KEYS_FILE);

const KEY_FORMAT = /^dms_([0-9a-f]{16})_([A-Za-z0-9_-]{43})$/;

const ApiKeyRecord = z.object({
  id: z.string().regex(/^[0-9a-f]{16}$/),
  name: z.string(),
  role: z.enum(ROLES),
  sha256: z.string().regex(/^[0-9a-f]{64}$/),
  created_at: z.string(),
});
export type ApiKeyRecord = z.infer<typeof ApiKeyRecord>;
const ApiKeyFile = z.object({ version: z.literal(1), keys: z.array(ApiKeyRecord) });

const sha256 = (text: string): string => createHash('sha256').update(text, 'utf8').digest('hex');

export function readApiKeys(path: string): ApiKeyRecord[] {
  if (!existsSync(path)) return [];
  try {
    return ApiKeyFile.parse(JSON.parse(readFileSync(path, 'utf8'))).keys;
  } catch (e) {
    throw new DmsError('invalid', `${path}: not a valid API key file (${(e as Error).message.split('\n')[0]})`);
  }
}

function writeApiKeys(path: string, keys: ApiKeyRecord[]): void {
  mkdirSync(dirname(path), { recursive: true, mode: 0o700 });
  const tmp = `${path}.${process.pid}.tmp`;
  writeFileSync(tmp, JSON.stringify({ version: 1, keys }, null, 2) + '\n', { mode: 0o600 });
  chmodSync(tmp, 0o600);
  renameSync(tmp, path);
}

/** Creates a key; the returned `key` is the only time the secret exists outside the caller's hands. */
export function createApiKey(path: string, role: Role, name = ''): { key: string; record: ApiKeyRecord } {
  const id = randomBytes(8).toString('hex');
  const key = `dms_${id}_${randomBytes(32).toString('base64url')}`;
  const record: ApiKeyRecord = { id, name, role, sha256: sha256(key), created_at: new Date().toISOString() };
  writeApiKeys(path, [...readApiKeys(path), record]);
  return { key, record };
}

/** Revokes by id; false when there was no such key. */
export function revokeApiKey(path: string, id: string): boolean {
  const keys = readApiKeys(path);
  const kept = keys.filter((k) => k.id !== id);
  if (kept.length === keys.length) return false;
  writeApiKeys(path, kept);
  return true;
}

/** The keys a running node accepts, re-read when `dms auth apikey create|revoke` changes the file. */
export class ApiKeyStore {
  private byId = new Map<string, ApiKeyRecord>();
  private stopWatching?: () => void;

  constructor(
    readonly path: string,
    private readonly log?: Logger,
  ) {
    this.reload();
  }

  private reload(): void {
    this.byId = new Map(readApiKeys(this.path).map((k) => [k.id, k]));
  }

  watch(intervalMs = 500): void {
    // Polling stat survives the atomic rename that replaces the file.
    const listener = () => {
      try {
        this.reload();
        this.log?.info({ keys: this.byId.size }, 'API keys reloaded');
      } catch (e) {
        this.log?.warn({ err: (e as Error).message }, 'API key file unreadable; keeping the keys loaded before');
      }
    };
    watchFile(this.path, { interval: intervalMs, persistent: false }, listener);
    this.stopWatching = () => unwatchFile(this.path, listener);
  }

  close(): void {
    this.stopWatching?.();
  }

  verify(presented: string): Principal | undefined {
    const m = KEY_FORMAT.exec(presented);
    if (!m) return undefined;
    const record = this.byId.get(m[1]);
    if (!record) return undefined;
    const ok = timingSafeEqual(Buffer.from(sha256(presented), 'hex'), Buffer.from(record.sha256, 'hex'));
    return ok ? { id: `apikey:${record.id}`, role: record.role, via: 'api-key' } : undefined;
  }
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
}

export const restAuthEnabled = (o: RestAuthOptions): boolean => Boolean(o.apiKeys || o.jwtSecret);

const unauthorized = (text: string) => new DmsError('unauthorized', text);

/** Authenticates a request; throws `unauthorized` (401) or `forbidden` (a token without a role). */
async function authenticate(event: H3Event, o: RestAuthOptions, jwts: JwtCache, secret?: Uint8Array): Promise<Principal> {
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
    return verifyJwt(m[1], secret, jwts);
  }
  const how = [o.apiKeys ? 'X-API-Key' : '', secret ? 'Authorization: Bearer <JWT>' : ''].filter(Boolean).join(' or ');
  throw unauthorized(`missing credentials: send ${how}`);
}

async function verifyJwt(token: string, secret: Uint8Array, cache: JwtCache): Promise<Principal> {
  const hit = cache.get(token);
  if (hit) {
    if (!hit.principal) throw new DmsError('forbidden', `bearer token carries no role (${ROLES.join(', ')})`);
    return hit.principal;
  }
  let payload;
  try {
    ({ payload } = await jwtVerify(token, secret, { algorithms: ['HS256'], requiredClaims: ['exp'] }));
  } catch (e) {
    // Never echo the token or jose's internals: say what is wrong in general terms.
    if (e instanceof joseErrors.JWTExpired) throw unauthorized('bearer token expired');
    if (e instanceof joseErrors.JWTClaimValidationFailed) throw unauthorized(`bearer token rejected: ${e.claim} claim invalid`);
    throw unauthorized('invalid bearer token');
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
    if (OPEN_PATHS.has(path)) return undefined;
    try {
      const p = await authenticate(event, o, jwts, secret);
      if (!roleAllows(p.role, event.req.method, path)) {
        throw new DmsError('forbidden', `role ${p.role} may not ${event.req.method} ${path}`);
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
