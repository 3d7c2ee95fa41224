import { readFileSync } from 'node:fs';
import { afterAll, describe, expect, it } from 'vitest';
import { implementations, VerifyKey } from '../../runtime/crypto/ed25519.js';
import { checkEnvelope } from '../../runtime/crypto/signing.js';
import { sodium, sodiumPath } from '../../runtime/crypto/sodium.js';
import { VerifyThread } from '../../runtime/crypto/verify-thread.js';
import { parseEnvelope, signingBytes } from '../../runtime/wire/envelope.js';
import { waitFor } from '../helpers/network.js';

/*
 * Signature checks on the verify thread (runtime/crypto/verify-thread.ts): the same verdicts as
 * libsodium inline, in the order asked, none lost when the thread goes, none held while it
 * starts; and the node's check sends a check there only when its event loop is busy and has
 * company (runtime/crypto/offload.ts).
 */
interface Vectors {
  identities: { public_key_hex: string; id: string }[];
  cases: { signer_id: string; wire_json: string; signing_input: string; sig: string }[];
  must_fail: { name: string; wire_json: string }[];
}
const vectors: Vectors = JSON.parse(readFileSync(new URL('../fixtures/wire-vectors.json', import.meta.url), 'utf8'));
const keyOf = (id: string) => Uint8Array.from(Buffer.from(vectors.identities.find((i) => i.id === id)!.public_key_hex, 'hex'));

interface Ask {
  key: Uint8Array;
  data: Uint8Array;
  sig: Uint8Array;
  want: boolean;
}

/** Every vector signature, each with one bit flipped, each must_fail case, and a small-order forgery. */
function asks(): Ask[] {
  const out: Ask[] = [];
  for (const c of vectors.cases) {
    const sig = Buffer.from(c.sig, 'base64');
    const flipped = Buffer.from(sig);
    flipped[10]! ^= 1;
    const data = Buffer.from(c.signing_input, 'utf8');
    out.push({ key: keyOf(c.signer_id), data, sig, want: true }, { key: keyOf(c.signer_id), data, sig: flipped, want: false });
  }
  for (const c of vectors.must_fail) {
    const env = parseEnvelope(c.wire_json);
    const ident = vectors.identities.find((i) => i.id === env.from.id);
    if (ident && env.sig) out.push({ key: keyOf(ident.id), data: signingBytes(env), sig: env.sig, want: false });
  }
  // R = identity, S = 0 under the identity point: a signature of every message, refused.
  const identity = new Uint8Array(32);
  identity[0] = 1;
  const forged = new Uint8Array(64);
  forged[0] = 1;
  out.push({ key: identity, data: Buffer.from('dms:msg:{}'), sig: forged, want: false });
  return out;
}

/** The node's inline check (libsodium's), as ed25519.ts gives it to the thread. */
const libsodiumCheck = (keyBytes: Uint8Array, data: Uint8Array, sig: Uint8Array) => implementations()[0]!.verifySync(new VerifyKey(keyBytes), data, sig);

const threads: VerifyThread[] = [];
afterAll(() => Promise.all(threads.map((t) => t.close())));

/** A verify thread that has started: until then it checks inline (the first check starts it). */
const newThread = async () => {
  const t = new VerifyThread(libsodiumCheck, sodiumPath()!);
  threads.push(t);
  const a = asks()[0]!;
  await new Promise<void>((resolve) => t.verify(a.key, a.data, a.sig, () => resolve()));
  expect(t.ready).toBe(false);
  await waitFor('the verify thread to start', () => t.ready, { timeoutMs: 10_000, intervalMs: 10 });
  return t;
};

/** Asks `t` for each check; resolves with the verdicts in the order they were given, and how often each came. */
function run(t: VerifyThread, list: Ask[]): Promise<{ order: number[]; verdicts: boolean[]; answers: number[] }> {
  const order: number[] = [];
  const verdicts: boolean[] = new Array(list.length);
  const answers = new Array<number>(list.length).fill(0);
  return new Promise((resolve) => {
    list.forEach((a, i) =>
      t.verify(a.key, a.data, a.sig, (_err, ok) => {
        order.push(i);
        verdicts[i] = ok;
        answers[i]!++;
        if (order.length === list.length) setTimeout(() => resolve({ order, verdicts, answers }), 50);
      }),
    );
  });
}

describe('the verify thread', () => {
  it('gives libsodium\'s verdict on every vector, flipped bit, must_fail case and small-order forgery', async () => {
    const t = await newThread();
    const list = asks();
    const { verdicts } = await run(t, list);
    expect(t.answered).toBe(list.length);
    expect(verdicts).toEqual(list.map((a) => a.want));
    expect(verdicts).toEqual(list.map((a) => sodium()!.crypto_sign_verify_detached(a.sig, a.data, a.key)));
  });

  it('answers in the order asked, across batches larger than one message carries, each check once', async () => {
    const t = await newThread();
    const base = asks();
    const list = Array.from({ length: 700 }, (_, i) => base[i % base.length]!);
    const { order, verdicts, answers } = await run(t, list);
    expect(t.answered).toBe(list.length);
    expect(order).toEqual(list.map((_, i) => i));
    expect(verdicts).toEqual(list.map((a) => a.want));
    expect(answers.every((n) => n === 1)).toBe(true);
  });

  it('checks inline, once each, what it held when it ends, and every check after', async () => {
    const t = await newThread();
    const list = asks();
    const pending = run(t, list);
    await t.close();
    const { verdicts, answers } = await pending;
    expect(verdicts).toEqual(list.map((a) => a.want));
    expect(answers.every((n) => n === 1)).toBe(true);
    expect(t.answered).toBe(0);
    expect(t.running).toBe(false);
    const after = await run(t, list.slice(0, 2));
    expect(after.verdicts).toEqual([true, false]);
    expect(t.running).toBe(false);
  });
});

describe('where the node checks a signature', () => {
  const good = parseEnvelope(vectors.cases[0]!.wire_json);
  const forged = parseEnvelope(vectors.must_fail[0]!.wire_json);
  const nextTurn = () => new Promise((r) => setImmediate(r));
  const spin = (ms: number) => {
    const end = performance.now() + ms;
    while (performance.now() < end);
  };

  it('inline while the loop is idle, even with company; on the thread when it is busy and has company', async () => {
    await nextTurn();
    // Idle: two checks in one turn both answer at once (the first sample of the loop is taken here).
    expect(checkEnvelope(good)).toBeUndefined();
    expect(checkEnvelope(good)).toBeUndefined();
    // A turn that kept the loop busy, then company: the first check inline, the others on the thread.
    spin(80);
    await nextTurn();
    expect(checkEnvelope(good)).toBeUndefined();
    const second = checkEnvelope(good);
    const refused = checkEnvelope(forged);
    expect(second).toBeInstanceOf(Promise);
    expect(refused).toBeInstanceOf(Promise);
    await expect(second).resolves.toBeUndefined();
    await expect(refused).rejects.toThrow(/signature does not verify/);
  });
});
