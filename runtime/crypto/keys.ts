import { createPrivateKey, createPublicKey, randomBytes, sign as nodeSign, verify as nodeVerify, type KeyObject } from 'node:crypto';
import { base58btc } from 'multiformats/bases/base58';
import { invalid } from '../errors.js';
import { runCrypto } from './offload.js';

// DER framings that let node:crypto take raw Ed25519 keys (RFC 8410).
const PKCS8_ED25519 = Buffer.from('302e020100300506032b657004220420', 'hex');
const SPKI_ED25519 = Buffer.from('302a300506032b6570032100', 'hex');
// Multicodec ed25519-pub (0xed, varint-encoded) as used by did:key.
const ED25519_PUB_MULTICODEC = [0xed, 0x01] as const;
// libp2p PeerId: identity multihash of the protobuf PublicKey { Type: Ed25519 (1), Data: 32 bytes }.
const PEER_ID_PREFIX = Uint8Array.from([0x00, 0x24, 0x08, 0x01, 0x12, 0x20]);

export const SEED_BYTES = 32;
export const PUBLIC_KEY_BYTES = 32;

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

/** A public key ready for node:crypto verification. */
export function publicKeyObject(publicKey: Uint8Array): KeyObject {
  return createPublicKey({ key: Buffer.concat([SPKI_ED25519, publicKey]), format: 'der', type: 'spki' });
}

/**
 * An Ed25519 identity. Signing uses node:crypto (native, and async on the libuv pool so the
 * event loop keeps serving while a signature is computed).
 */
export class KeyPair {
  readonly seed: Uint8Array;
  readonly publicKey: Uint8Array;
  readonly id: string;
  readonly did: string;
  readonly peerId: string;
  private readonly privateKeyObject: KeyObject;

  private constructor(seed: Uint8Array) {
    if (seed.length !== SEED_BYTES) throw invalid(`an Ed25519 seed is ${SEED_BYTES} bytes, got ${seed.length}`);
    this.seed = Uint8Array.from(seed);
    this.privateKeyObject = createPrivateKey({ key: Buffer.concat([PKCS8_ED25519, seed]), format: 'der', type: 'pkcs8' });
    const spki = createPublicKey(this.privateKeyObject).export({ format: 'der', type: 'spki' });
    this.publicKey = Uint8Array.from(spki.subarray(SPKI_ED25519.length));
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
    return nodeSign(null, data, this.privateKeyObject);
  }

  /** Signs on the message path, inline or on the libuv pool (./placement.ts). */
  sign(data: Uint8Array): Promise<Uint8Array> {
    return runCrypto<Uint8Array>(
      () => this.signSync(data),
      (done) => nodeSign(null, data, this.privateKeyObject, done),
    );
  }
}

/** Resolves false on a bad signature instead of throwing; inline or on the libuv pool (./placement.ts). */
export function verifyAsync(key: KeyObject, data: Uint8Array, sig: Uint8Array): Promise<boolean> {
  return runCrypto<boolean>(
    () => verifySync(key, data, sig),
    (done) => nodeVerify(null, data, key, sig, (err, ok) => done(null, !err && ok)),
  );
}

export function verifySync(key: KeyObject, data: Uint8Array, sig: Uint8Array): boolean {
  try {
    return nodeVerify(null, data, key, sig);
  } catch {
    return false;
  }
}
