import { createPrivateKey, createPublicKey, sign as nodeSign, verify as nodeVerify, type KeyObject } from 'node:crypto';
import { Point } from '@noble/ed25519';
import { runCrypto } from './offload.js';
import { type Sodium, sodium as loadSodium } from './sodium.js';
import { verifyThread } from './verify-thread.js';

/*
 * The Ed25519 primitive, in one place. libsodium (sodium-native, whose npm package carries the
 * binary for each platform: nothing compiles) checks a signature in about half the time of
 * node:crypto's OpenSSL (bench/RESULTS.md: 51 against 110 µs on this machine), and a check is
 * what every envelope from the network or a signing client pays. So libsodium runs when it
 * loads: its checks inline, or in batches on the verify thread (./verify-thread.ts) when the
 * event loop is busy with company (./offload.ts); its signatures always inline. Where it does
 * not load (a platform without a prebuilt binary), node:crypto runs, inline or on the libuv
 * pool as ./offload.ts decides.
 *
 * The two agree on every signature an Ed25519 signer makes (RFC 8032 signatures are
 * deterministic; test/unit/ed25519.test.ts runs the wire vectors through both). OpenSSL accepts
 * every message under a small-order public key, given a signature anyone can make; libsodium
 * refuses such keys, and the OpenSSL path here refuses them before asking OpenSSL. They still
 * differ on crafted encodings no signer makes (libsodium also refuses a small-order or
 * non-canonical R). One node uses one implementation for every check, so its verdict on an
 * envelope never depends on its load.
 */

// DER framings that let node:crypto take raw Ed25519 keys (RFC 8410).
const PKCS8_ED25519 = Buffer.from('302e020100300506032b657004220420', 'hex');
const SPKI_ED25519 = Buffer.from('302a300506032b6570032100', 'hex');

export const SEED_BYTES = 32;
export const PUBLIC_KEY_BYTES = 32;
const SIGNATURE_BYTES = 64;

/** A public key as checks take it: its bytes, and node:crypto's form made when first needed. */
export class VerifyKey {
  private object?: KeyObject;
  private weak?: boolean;

  constructor(readonly bytes: Uint8Array) {
    if (bytes.length !== PUBLIC_KEY_BYTES) throw new RangeError(`an Ed25519 public key is ${PUBLIC_KEY_BYTES} bytes, got ${bytes.length}`);
  }

  get keyObject(): KeyObject {
    return (this.object ??= createPublicKey({ key: Buffer.concat([SPKI_ED25519, this.bytes]), format: 'der', type: 'spki' }));
  }

  /**
   * Whether the key is a point of small order (or no point at all), under which anyone can make
   * a signature. libsodium refuses these itself; OpenSSL does not, so its checks ask first.
   */
  get smallOrder(): boolean {
    if (this.weak === undefined) {
      try {
        this.weak = Point.fromBytes(this.bytes).isSmallOrder();
      } catch {
        this.weak = true;
      }
    }
    return this.weak;
  }
}

/** A private key as signing takes it, from its 32-byte seed. */
export class SigningKey {
  readonly publicKey: Uint8Array;
  private object?: KeyObject;
  private expanded?: Buffer;

  constructor(private readonly seed: Uint8Array) {
    if (seed.length !== SEED_BYTES) throw new RangeError(`an Ed25519 seed is ${SEED_BYTES} bytes, got ${seed.length}`);
    const spki = createPublicKey(this.keyObject).export({ format: 'der', type: 'spki' });
    this.publicKey = Uint8Array.from(spki.subarray(SPKI_ED25519.length));
  }

  get keyObject(): KeyObject {
    return (this.object ??= createPrivateKey({ key: Buffer.concat([PKCS8_ED25519, this.seed]), format: 'der', type: 'pkcs8' }));
  }

  /** libsodium's 64-byte secret key: the seed, then the public key. */
  get secretKey(): Buffer {
    return (this.expanded ??= Buffer.concat([this.seed, this.publicKey]));
  }
}

/**
 * One implementation. `sign` and `verify` answer synchronously when they ran inline and with a
 * promise when they went to the pool, so a caller on the message path awaits only then (an
 * await of a settled value still waits behind every continuation queued before it: 0.09–0.19 ms
 * p50 for a broadcast's subscriber, bench:net's (f) `behavior.prepare`). A bad signature is
 * `false`, never a throw.
 */
export interface Ed25519 {
  readonly name: 'libsodium' | 'openssl';
  sign(key: SigningKey, data: Uint8Array): Uint8Array | Promise<Uint8Array>;
  signSync(key: SigningKey, data: Uint8Array): Uint8Array;
  verify(key: VerifyKey, data: Uint8Array, sig: Uint8Array): boolean | Promise<boolean>;
  verifySync(key: VerifyKey, data: Uint8Array, sig: Uint8Array): boolean;
}

function libsodium(sodium: Sodium): Ed25519 {
  const signSync = (key: SigningKey, data: Uint8Array): Uint8Array => {
    const sig = Buffer.allocUnsafe(SIGNATURE_BYTES);
    sodium.crypto_sign_detached(sig, data, key.secretKey);
    return sig;
  };
  // The node's one libsodium check, inline here and the verify thread's when it cannot take one
  // (bench/lib/variant-build.ts finds it, and the thread's, by the name of the key's bytes).
  const checkBytes = (keyBytes: Uint8Array, data: Uint8Array, sig: Uint8Array): boolean =>
    sig.length === SIGNATURE_BYTES && sodium.crypto_sign_verify_detached(sig, data, keyBytes);
  const verifySync = (key: VerifyKey, data: Uint8Array, sig: Uint8Array): boolean => checkBytes(key.bytes, data, sig);
  const verify = (key: VerifyKey, data: Uint8Array, sig: Uint8Array): boolean | Promise<boolean> => {
    const thread = sig.length === SIGNATURE_BYTES ? verifyThread(checkBytes) : null;
    if (!thread) return verifySync(key, data, sig);
    return runCrypto(
      () => verifySync(key, data, sig),
      (done) => thread.verify(key.bytes, data, sig, done),
    );
  };
  return { name: 'libsodium', sign: signSync, signSync, verify, verifySync };
}

const openssl: Ed25519 = {
  name: 'openssl',
  signSync: (key, data) => nodeSign(null, data, key.keyObject),
  sign: (key, data) =>
    runCrypto<Uint8Array>(
      () => nodeSign(null, data, key.keyObject),
      (done) => nodeSign(null, data, key.keyObject, done),
    ),
  verifySync(key, data, sig) {
    if (key.smallOrder) return false;
    try {
      return nodeVerify(null, data, key.keyObject, sig);
    } catch {
      return false;
    }
  },
  verify(key, data, sig) {
    if (key.smallOrder) return false;
    return runCrypto<boolean>(
      () => openssl.verifySync(key, data, sig),
      (done) => nodeVerify(null, data, key.keyObject, sig, (err, ok) => done(null, !err && ok)),
    );
  },
};

let loaded: readonly Ed25519[] | undefined;

/**
 * Every implementation this process can run, the one the node uses first. libsodium loads when
 * first asked for (11–18 ms here): a `dms` command that signs nothing never pays it.
 */
export function implementations(): readonly Ed25519[] {
  if (!loaded) {
    const lib = loadSodium();
    loaded = lib ? [libsodium(lib), openssl] : [openssl];
  }
  return loaded;
}

const chosen = (): Ed25519 => implementations()[0]!;

/** The implementation the node uses for every signature it makes and checks. */
export const ed25519: Ed25519 = {
  get name() {
    return chosen().name;
  },
  sign: (key, data) => chosen().sign(key, data),
  signSync: (key, data) => chosen().signSync(key, data),
  verify: (key, data, sig) => chosen().verify(key, data, sig),
  verifySync: (key, data, sig) => chosen().verifySync(key, data, sig),
};
