import { createRequire } from 'node:module';

/*
 * libsodium through sodium-native, whose npm package carries the binary for each platform:
 * nothing compiles at install. Loaded when first asked for (11–18 ms here), so a `dms` command
 * that signs and dials nothing never pays it; absent (a platform without a prebuilt binary),
 * every caller falls back to node:crypto.
 */

/** The libsodium calls DMS makes, by sodium-native's names. */
export interface Sodium {
  crypto_sign_detached(sig: Uint8Array, message: Uint8Array, secretKey: Uint8Array): void;
  crypto_sign_verify_detached(sig: Uint8Array, message: Uint8Array, publicKey: Uint8Array): boolean;
  /** Writes ciphertext ‖ tag into `c` (`m.byteLength + 16` bytes); returns its length. */
  crypto_aead_chacha20poly1305_ietf_encrypt(c: Uint8Array, m: Uint8Array, ad: Uint8Array | null, nsec: null, npub: Uint8Array, k: Uint8Array): number;
  /** Writes the plaintext of `c` (ciphertext ‖ tag) into `m`; throws when the tag does not check. */
  crypto_aead_chacha20poly1305_ietf_decrypt(m: Uint8Array, nsec: null, c: Uint8Array, ad: Uint8Array | null, npub: Uint8Array, k: Uint8Array): number;
  /** The same with the tag apart from the ciphertext; throws when it does not check. */
  crypto_aead_chacha20poly1305_ietf_decrypt_detached(m: Uint8Array, nsec: null, c: Uint8Array, mac: Uint8Array, ad: Uint8Array | null, npub: Uint8Array, k: Uint8Array): void;
}

let loaded: Sodium | null | undefined;
let path: string | null | undefined;

/** Where sodium-native's entry point is, for a worker thread to load it; null where it cannot be found. */
export function sodiumPath(): string | null {
  if (path === undefined) {
    try {
      path = createRequire(import.meta.url).resolve('sodium-native');
    } catch {
      path = null;
    }
  }
  return path;
}

/** libsodium, or null where it does not load. */
export function sodium(): Sodium | null {
  if (loaded === undefined) {
    try {
      loaded = createRequire(import.meta.url)('sodium-native') as Sodium;
    } catch {
      loaded = null;
    }
  }
  return loaded;
}
