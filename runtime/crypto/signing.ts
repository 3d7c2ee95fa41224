import { invalid } from '../errors.js';
import { type Envelope, signingBytes } from '../wire/envelope.js';
import { ed25519, type VerifyKey } from './ed25519.js';
import { didFromId, type KeyPair, verifyKeyFromId } from './keys.js';

/** Signs in place with `key`, which must be the key named by `env.from.id`. */
export async function signEnvelope(env: Envelope, key: KeyPair): Promise<Envelope> {
  await sealEnvelope(env, key);
  return env;
}

/**
 * `signEnvelope` for the message path: signs in place and returns nothing when the signature
 * was made inline, a promise only when it went to the pool.
 */
export function sealEnvelope(env: Envelope, key: KeyPair): void | Promise<void> {
  const sig = key.signNow(signingBytes(env));
  if (sig instanceof Uint8Array) {
    env.sig = sig;
    return;
  }
  return sig.then((s) => {
    env.sig = s;
  });
}

// Decoding a key id (base58) costs a good part of a check; senders repeat.
const KEY_CACHE_LIMIT = 10_000;
const keyCache = new Map<string, VerifyKey>();

function keyFor(id: string): VerifyKey {
  let key = keyCache.get(id);
  if (!key) {
    key = verifyKeyFromId(id);
    if (keyCache.size >= KEY_CACHE_LIMIT) keyCache.delete(keyCache.keys().next().value!);
    keyCache.set(id, key);
  }
  return key;
}

/** The checks every signed envelope passes before its signature is even computed. */
function precheck(env: Envelope): VerifyKey {
  if (!env.sig) throw invalid('sig: envelope is not signed');
  if (!env.from.id) throw invalid('from.id is required on a signed envelope');
  if (env.from.did !== didFromId(env.from.id)) throw invalid('from.did does not match from.id');
  return keyFor(env.from.id);
}

const refused = () => invalid('sig: signature does not verify');

/** Rejects with an `invalid` DmsError unless the envelope is signed by the key named in `from.id`. */
export async function verifyEnvelope(env: Envelope): Promise<void> {
  await checkEnvelope(env);
}

/** Envelope signatures this process checked (./verify-thread.ts counts those it ran). */
export const envelopeChecks = { total: 0 };

/**
 * `verifyEnvelope` for the message path: returns nothing when the check ran inline (its verdict
 * already given, by returning or throwing) and a promise only when it went off the event loop,
 * so the kernel awaits only then (./ed25519.ts says what an await costs there).
 */
export function checkEnvelope(env: Envelope): void | Promise<void> {
  const key = precheck(env);
  const ok = ed25519.verify(key, signingBytes(env), env.sig!);
  envelopeChecks.total++;
  if (ok === true) return;
  if (ok === false) throw refused();
  return ok.then((valid) => {
    if (!valid) throw refused();
  });
}
