import type { KeyObject } from 'node:crypto';
import { invalid } from '../errors.js';
import { type Envelope, signingBytes } from '../wire/envelope.js';
import { didFromId, KeyPair, publicKeyFromId, publicKeyObject, verifyAsync } from './keys.js';

/** Signs in place with `key`, which must be the key named by `env.from.id`. */
export async function signEnvelope(env: Envelope, key: KeyPair): Promise<Envelope> {
  env.sig = await key.sign(signingBytes(env));
  return env;
}

// Parsing a public key into a KeyObject costs more than the verification itself; senders repeat.
const KEY_CACHE_LIMIT = 10_000;
const keyCache = new Map<string, KeyObject>();

function keyFor(id: string): KeyObject {
  let key = keyCache.get(id);
  if (!key) {
    key = publicKeyObject(publicKeyFromId(id));
    if (keyCache.size >= KEY_CACHE_LIMIT) keyCache.delete(keyCache.keys().next().value!);
    keyCache.set(id, key);
  }
  return key;
}

/** The checks every signed envelope passes before its signature is even computed. */
function precheck(env: Envelope): KeyObject {
  if (!env.sig) throw invalid('sig: envelope is not signed');
  if (!env.from.id) throw invalid('from.id is required on a signed envelope');
  if (env.from.did !== didFromId(env.from.id)) throw invalid('from.did does not match from.id');
  return keyFor(env.from.id);
}

/** Throws an `invalid` DmsError unless the envelope is signed by the key named in `from.id`. */
export async function verifyEnvelope(env: Envelope): Promise<void> {
  const key = precheck(env);
  if (!(await verifyAsync(key, signingBytes(env), env.sig!))) throw invalid('sig: signature does not verify');
}
