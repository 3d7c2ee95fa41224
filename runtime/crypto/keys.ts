import { randomBytes } from 'node:crypto';
import { base58btc } from 'multiformats/bases/base58';
import { invalid } from '../errors.js';
import { ed25519, PUBLIC_KEY_BYTES, SEED_BYTES, SigningKey, VerifyKey } from './ed25519.js';
// Multicodec ed25519-pub (0xed, varint-encoded) as used by did:key.
const ED25519_PUB_MULTICODEC = [0xed, 0x01] as const;
// libp2p PeerId: identity multihash of the protobuf PublicKey { Type: Ed25519 (1), Data: 32 bytes }.
const PEER_ID_PREFIX = Uint8Array.from([0x00, 0x24, 0x08, 0x01, 0x12, 0x20]);

/** `z6Mk…`: base58btc multibase of 0xED 0x01 ‖ public key. */
export function idFromPublicKey(publicKey: Uint8Array): string {
  const bytes = new Uint8Array(2 + PUBLIC_KEY_BYTES);
  bytes.set(ED25519_PUB_MULTICODEC, 0);
  bytes.set(publicKey, 2);
  return base58btc.encode(bytes);
}

export const didFromId = (id: string): string => `did:key:${id}`;

/** The public key named by an id; an id that is not an Ed25519 did:key id is invalid input. */
export function publicKeyFromId(id: string): Uint8Array {
  let bytes: Uint8Array;
  try {
    bytes = base58btc.decode(id);
  } catch {
    throw invalid(`from.id: '${truncate(id)}' is not a base58btc multibase key id`);
  }
  if (bytes.length !== 2 + PUBLIC_KEY_BYTES || bytes[0] !== 0xed || bytes[1] !== 0x01) {
    throw invalid(`from.id: '${truncate(id)}' is not an Ed25519 key id`);
  }
  return bytes.subarray(2);
}

export function peerIdFromPublicKey(publicKey: Uint8Array): string {
  const mh = new Uint8Array(PEER_ID_PREFIX.length + PUBLIC_KEY_BYTES);
  mh.set(PEER_ID_PREFIX, 0);
  mh.set(publicKey, PEER_ID_PREFIX.length);
  // libp2p writes peer ids as bare base58btc, without the multibase 'z'.
  return base58btc.baseEncode(mh);
}

/**
 * Whether a string is a libp2p peer id as text: base58btc of an identity multihash (inlined
 * public key, 0x00) or of a sha2-256 multihash (0x12 0x20, for large keys).
 */
export function isPeerId(text: string): boolean {
  if (text.length < 40 || text.length > 60) return false;
  let bytes: Uint8Array;
  try {
    bytes = base58btc.baseDecode(text);
  } catch {
    return false;
  }
  if (bytes[0] === 0x00) return bytes.length >= 2 && bytes[1] === bytes.length - 2;
  return bytes[0] === 0x12 && bytes[1] === 0x20 && bytes.length === 34;
}

/** The did:key of the Ed25519 key a peer id inlines; null for any other peer id (no DMS node has one). */
export function didOfPeer(peer: string): string | null {
  let bytes: Uint8Array;
  try {
    bytes = base58btc.baseDecode(peer);
  } catch {
    return null;
  }
  if (bytes.length !== PEER_ID_PREFIX.length + PUBLIC_KEY_BYTES || PEER_ID_PREFIX.some((b, i) => bytes[i] !== b)) return null;
  return didFromId(idFromPublicKey(bytes.subarray(PEER_ID_PREFIX.length)));
}

function truncate(s: string): string {
  return s.length > 64 ? `${s.slice(0, 64)}…` : s;
}

/**
 * An Ed25519 identity. Signing is ./ed25519.ts's: libsodium inline, or node:crypto inline or
 * on the libuv pool where libsodium does not load.
 */
export class KeyPair {
  readonly seed: Uint8Array;
  readonly publicKey: Uint8Array;
  readonly id: string;
  readonly did: string;
  readonly peerId: string;
  private readonly signingKey: SigningKey;

  private constructor(seed: Uint8Array) {
    if (seed.length !== SEED_BYTES) throw invalid(`an Ed25519 seed is ${SEED_BYTES} bytes, got ${seed.length}`);
    this.seed = Uint8Array.from(seed);
    this.signingKey = new SigningKey(this.seed);
    this.publicKey = this.signingKey.publicKey;
    this.id = idFromPublicKey(this.publicKey);
    this.did = didFromId(this.id);
    this.peerId = peerIdFromPublicKey(this.publicKey);
  }

  static fromSeed(seed: Uint8Array): KeyPair {
    return new KeyPair(seed);
  }

  static generate(): KeyPair {
    return new KeyPair(randomBytes(SEED_BYTES));
  }

  signSync(data: Uint8Array): Uint8Array {
    return ed25519.signSync(this.signingKey, data);
  }

  /** Signs where it costs least now (./ed25519.ts): inline, or on the libuv pool. */
  async sign(data: Uint8Array): Promise<Uint8Array> {
    return this.signNow(data);
  }

  /**
   * `sign` for the message path: the signature itself when it was made inline, a promise only
   * when it went to the pool, so the caller awaits only then (./ed25519.ts says why).
   */
  signNow(data: Uint8Array): Uint8Array | Promise<Uint8Array> {
    return ed25519.sign(this.signingKey, data);
  }
}

/** Whether `sig` is `key`'s signature of `data`; false, never a throw, for a bad one. */
export function verifySync(key: VerifyKey, data: Uint8Array, sig: Uint8Array): boolean {
  return ed25519.verifySync(key, data, sig);
}

/** The key named by an Ed25519 did:key id, ready for checks; an id that is not one is invalid input. */
export function verifyKeyFromId(id: string): VerifyKey {
  return new VerifyKey(publicKeyFromId(id));
}
