import { createHash, randomBytes } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import * as z from 'zod';
import { DmsError } from './errors.js';
import { writeJsonAtomic } from './files.js';

/**
 * REST roles and the API key file of a home: what `dms auth` edits and the running node's
 * HTTP actor checks (http/apikeys.ts). Here, not in http/, because the CLI edits the file
 * without any of the HTTP layer.
 */

export const ROLES = ['admin', 'operator', 'viewer'] as const;
export type Role = (typeof ROLES)[number];
export const isRole = (x: unknown): x is Role => ROLES.includes(x as Role);

// ---------------------------------------------------------------------------------------------
// API keys: `dms_<id>_<secret>`. The home keeps the id, role and a SHA-256 of the whole key; the
// key itself is shown once, at creation. Keys are 256-bit random, so a fast hash is enough:
// nobody can guess a preimage, and checking costs one hash per request.

export const API_KEYS_FILE = 'apikeys.json';
export const apiKeysPath = (home: string): string => join(home, API_KEYS_FILE);

export const KEY_FORMAT = /^dms_([0-9a-f]{16})_([A-Za-z0-9_-]{43})$/;

const ApiKeyRecord = z.object({
  id: z.string().regex(/^[0-9a-f]{16}$/),
  name: z.string(),
  role: z.enum(ROLES),
  sha256: z.string().regex(/^[0-9a-f]{64}$/),
  created_at: z.string(),
});
export type ApiKeyRecord = z.infer<typeof ApiKeyRecord>;
const ApiKeyFile = z.object({ version: z.literal(1), keys: z.array(ApiKeyRecord) });

export const sha256 = (text: string): string => createHash('sha256').update(text, 'utf8').digest('hex');

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

