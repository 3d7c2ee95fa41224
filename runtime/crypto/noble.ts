import * as ed from '@noble/ed25519';
import { sha512 } from '@noble/hashes/sha2.js';

// The portable path: pure JS, for runtimes without node:crypto's Ed25519 (browsers, workers).
// Same keys, same bytes, same signatures as KeyPair; about 15x slower, so never on the node's
// message path.
ed.hashes.sha512 = sha512;

export const noblePublicKey = (seed: Uint8Array): Uint8Array => ed.getPublicKey(seed);
export const nobleSign = (data: Uint8Array, seed: Uint8Array): Uint8Array => ed.sign(data, seed);
export const nobleVerify = (sig: Uint8Array, data: Uint8Array, publicKey: Uint8Array): boolean => {
  try {
    return ed.verify(sig, data, publicKey);
  } catch {
    return false;
  }
};
