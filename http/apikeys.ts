import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';
import { existsSync, readFileSync, unwatchFile, watchFile } from 'node:fs';
import { join } from 'node:path';
import * as z from 'zod';
import { DmsError } from '../runtime/errors.js';
import { writeJsonAtomic } from '../runtime/files.js';
import type { Logger } from '../runtime/log.js';

/** REST roles and the API keys of a home: what `dms auth` edits and the auth middleware checks. */

export const ROLES = ['admin', 'operator', 'viewer'] as const;
export type Role = (typeof ROLES)[number];
export const isRole = (x: unknown): x is Role => ROLES.includes(x as Role);

/** Who a request is from, once authenticated. `id` names them for rate limits and logs; it is never a secret. */
export interface Principal {
  id: string;
  role: Role;
  via: 'api-key' | 'jwt';
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
  writeJsonAtomic(path, { version: 1, keys }, 0o600);
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

