import { KeyPair } from '../../runtime/crypto/keys.js';
import { msToNs, nextNonce, nowNs } from '../../runtime/time.js';
import { emptyHandle, encodeEnvelope, encodePayload, type Envelope, type Handle, signingBytes } from '../../runtime/wire/envelope.js';

/**
 * Signs in place, synchronously, as a test or bench builds many envelopes at once; the node
 * itself signs with runtime/crypto/signing.ts's signEnvelope, whose signatures are the same
 * bytes (test/unit/wire-vectors.test.ts).
 */
export function signEnvelopeSync(env: Envelope, key: KeyPair): Envelope {
  env.sig = key.signSync(signingBytes(env));
  return env;
}

/** A REST caller's identity: its key and the inbox its replies come to. */
export interface Caller {
  key?: KeyPair;
  inbox: string;
}

export const newCaller = (signed = true): Caller => ({
  key: signed ? KeyPair.generate() : undefined,
  inbox: `user-${Math.random().toString(16).slice(2, 10)}`,
});

export interface Build {
  to?: Handle;
  be: string;
  payload?: unknown;
  ttlMs?: number;
  exp?: bigint;
  cont?: string;
  topic?: string;
  host?: string;
  nonce?: bigint;
}

export function envelope(caller: Caller, b: Build): Envelope {
  const env: Envelope = {
    to: b.to ?? emptyHandle(),
    be: b.be,
    from: {
      id: caller.key?.id ?? '',
      did: caller.key?.did ?? '',
      addr: { host: b.host ?? '', inbox: caller.inbox },
    },
    nonce: b.nonce ?? nextNonce(),
    opt: { exp: b.exp ?? nowNs() + msToNs(b.ttlMs ?? 5_000) },
    msg: encodePayload(b.payload ?? {}),
  };
  if (b.cont) env.opt.cont = b.cont;
  if (b.topic) env.opt.topic = b.topic;
  return caller.key ? signEnvelopeSync(env, caller.key) : env;
}

export const wire = (caller: Caller, b: Build): string => encodeEnvelope(envelope(caller, b));

export const rootOf = (peerId: string, id = '', did = ''): Handle => ({ id, did, addr: { host: peerId, inbox: 'root' } });

export async function post(url: string, body: string, init: RequestInit = {}): Promise<{ status: number; text: string; json: any; headers: Headers }> {
  const res = await fetch(url, { method: 'POST', body, headers: { 'content-type': 'application/json' }, ...init });
  const text = await res.text();
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    json = undefined;
  }
  return { status: res.status, text, json, headers: res.headers };
}
