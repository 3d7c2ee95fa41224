import { createCipheriv, createDecipheriv, randomBytes, scryptSync } from 'node:crypto';
import * as z from 'zod';
import { DmsError } from '../errors.js';

/**
 * Secrets at rest under a passphrase: scrypt stretches the passphrase into a key, AES-256-GCM
 * encrypts and authenticates. The associated data (a key file's DID) binds the ciphertext to
 * its context, so a sealed seed cannot be moved under another identity unnoticed.
 */

// N = 2^15, r = 8: 32 MiB and ~0.1 s per unlock, OWASP's floor for scrypt. Stored per file so
// they can be raised later without breaking existing files.
const DEFAULT_PARAMS = { N: 32_768, r: 8, p: 1 } as const;
const MAX_N = 1 << 20;

export const Sealed = z.object({
  kdf: z.literal('scrypt'),
  N: z.number().int().min(1024).max(MAX_N).refine((n) => (n & (n - 1)) === 0, 'N must be a power of two'),
  r: z.number().int().min(1).max(32),
  p: z.number().int().min(1).max(16),
  salt: z.base64(),
  cipher: z.literal('aes-256-gcm'),
  iv: z.base64(),
  tag: z.base64(),
  data: z.base64(),
});
export type Sealed = z.infer<typeof Sealed>;

function derive(passphrase: string, salt: Buffer, N: number, r: number, p: number): Buffer {
  return scryptSync(passphrase.normalize('NFC'), salt, 32, { N, r, p, maxmem: 256 * N * r + 1024 * 1024 });
}

export function seal(secret: Uint8Array, passphrase: string, aad: string): Sealed {
  if (!passphrase) throw new DmsError('invalid', 'an empty passphrase encrypts nothing');
  const { N, r, p } = DEFAULT_PARAMS;
  const salt = randomBytes(16);
  const iv = randomBytes(12);
  const cipher = createCipheriv('aes-256-gcm', derive(passphrase, salt, N, r, p), iv);
  cipher.setAAD(Buffer.from(aad, 'utf8'));
  const data = Buffer.concat([cipher.update(secret), cipher.final()]);
  const b64 = (b: Buffer) => b.toString('base64');
  return { kdf: 'scrypt', N, r, p, salt: b64(salt), cipher: 'aes-256-gcm', iv: b64(iv), tag: b64(cipher.getAuthTag()), data: b64(data) };
}

/** Decrypts; a wrong passphrase, other associated data or any altered byte fails the same way. */
export function unseal(s: Sealed, passphrase: string, aad: string, what: string): Uint8Array {
  const decipher = createDecipheriv('aes-256-gcm', derive(passphrase, Buffer.from(s.salt, 'base64'), s.N, s.r, s.p), Buffer.from(s.iv, 'base64'));
  decipher.setAAD(Buffer.from(aad, 'utf8'));
  decipher.setAuthTag(Buffer.from(s.tag, 'base64'));
  try {
    return Uint8Array.from(Buffer.concat([decipher.update(Buffer.from(s.data, 'base64')), decipher.final()]));
  } catch {
    throw new DmsError('unauthorized', `${what}: wrong passphrase, or the file was altered`);
  }
}

/** The passphrase from `DMS_PASSPHRASE`, if set; never logged, never part of an error text. */
export function passphraseFromEnv(env: NodeJS.ProcessEnv = process.env): string | undefined {
  return env.DMS_PASSPHRASE || undefined;
}
