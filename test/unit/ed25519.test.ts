import { readFileSync } from 'node:fs';
import { verify as nodeVerify } from 'node:crypto';
import { generateKeyPairFromSeed, publicKeyFromRaw } from '@libp2p/crypto/keys';
import { Point } from '@noble/ed25519';
import { describe, expect, it } from 'vitest';
import { ed25519, implementations, SigningKey, VerifyKey } from '../../runtime/crypto/ed25519.js';
import { idFromPublicKey } from '../../runtime/crypto/keys.js';
import { checkEnvelope } from '../../runtime/crypto/signing.js';
import { parseEnvelope, signingBytes } from '../../runtime/wire/envelope.js';

/*
 * Both Ed25519 implementations a node may run (runtime/crypto/ed25519.ts), each against the wire
 * vectors: whichever loads, a node signs and checks exactly as every other program does.
 */
interface Vectors {
  identities: { seed_hex: string; public_key_hex: string; id: string }[];
  cases: { name: string; signer_id: string; wire_json: string; signing_input: string; sig: string }[];
  must_fail: { name: string; wire_json: string }[];
}
const vectors: Vectors = JSON.parse(readFileSync(new URL('../fixtures/wire-vectors.json', import.meta.url), 'utf8'));
const hex = (h: string) => Uint8Array.from(Buffer.from(h, 'hex'));

describe('the Ed25519 implementations', () => {
  it('libsodium is the one a node runs on this platform (its binary ships in sodium-native\'s npm package)', () => {
    expect(implementations().map((i) => i.name)).toEqual(['libsodium', 'openssl']);
    expect(ed25519.name).toBe('libsodium');
  });

  for (const impl of implementations()) {
    describe(impl.name, () => {
      it('derives every vector identity\'s public key and reproduces every vector signature', async () => {
        for (const c of vectors.cases) {
          const ident = vectors.identities.find((i) => i.id === c.signer_id)!;
          const key = new SigningKey(hex(ident.seed_hex));
          expect(Buffer.from(key.publicKey).toString('hex')).toBe(ident.public_key_hex);
          const data = Buffer.from(c.signing_input, 'utf8');
          expect(Buffer.from(impl.signSync(key, data)).toString('base64'), c.name).toBe(c.sig);
          expect(Buffer.from(await impl.sign(key, data)).toString('base64'), c.name).toBe(c.sig);
        }
      });

      it('accepts every vector signature and refuses every must_fail case', async () => {
        for (const c of vectors.cases) {
          const key = new VerifyKey(hex(vectors.identities.find((i) => i.id === c.signer_id)!.public_key_hex));
          const data = Buffer.from(c.signing_input, 'utf8');
          const sig = Buffer.from(c.sig, 'base64');
          expect(impl.verifySync(key, data, sig), c.name).toBe(true);
          expect(await impl.verify(key, data, sig), c.name).toBe(true);
          const flipped = Buffer.from(sig);
          flipped[10]! ^= 1;
          expect(impl.verifySync(key, data, flipped), `${c.name}, one bit flipped`).toBe(false);
        }
        for (const c of vectors.must_fail) {
          const env = parseEnvelope(c.wire_json);
          const key = new VerifyKey(hex(idHex(env.from.id)));
          expect(impl.verifySync(key, signingBytes(env), env.sig ?? new Uint8Array(64)), c.name).toBe(false);
        }
      });

      it('answers false, never throws, for a signature of the wrong length', () => {
        const key = new VerifyKey(hex(vectors.identities[0]!.public_key_hex));
        expect(impl.verifySync(key, Buffer.from('x'), new Uint8Array(63))).toBe(false);
        expect(impl.verifySync(key, Buffer.from('x'), new Uint8Array(65))).toBe(false);
      });
    });
  }

  it('the node refuses a signature anyone can make: the small-order keys OpenSSL alone accepts every message under', async () => {
    // The identity point as a public key, and R = identity, S = 0: [S]B = R + [k]A holds for
    // every message. OpenSSL's own check accepts it; libsodium refuses small-order keys, and the
    // OpenSSL implementation asks first.
    const identity = new Uint8Array(32);
    identity[0] = 1;
    const sig = new Uint8Array(64);
    sig[0] = 1;
    const key = new VerifyKey(identity);
    const data = Buffer.from('dms:msg:{"be":"/anything"}');
    expect(nodeVerify(null, data, key.keyObject, sig)).toBe(true);
    for (const impl of implementations()) {
      expect(impl.verifySync(key, data, sig), impl.name).toBe(false);
    }
    // Every point of order 8 or less: [k]T is then one of them, so R = T', S = 0 forges for some messages.
    const torsion = Point.fromBytes(Buffer.from('26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc05', 'hex'));
    for (let i = 1, t = torsion; i <= 8; i++, t = t.add(torsion)) expect(new VerifyKey(t.toBytes()).smallOrder, `8-torsion point ${i}`).toBe(true);
    expect(new VerifyKey(hex(vectors.identities[0]!.public_key_hex)).smallOrder).toBe(false);
    expect(new VerifyKey(new Uint8Array(32).fill(0xff)).smallOrder, 'not a point').toBe(true);

    const id = idFromPublicKey(identity);
    const env = parseEnvelope(
      JSON.stringify({ to: {}, be: '/anything', from: { id, did: `did:key:${id}` }, nonce: 1, opt: { exp: 1 }, msg: '', sig: Buffer.from(sig).toString('base64') }),
    );
    // Inline or on the verify thread (a busy loop with company), the verdict is the same.
    await expect(Promise.resolve().then(() => checkEnvelope(env))).rejects.toThrow(/signature does not verify/);
  });

  it('libp2p signs and checks with libsodium too (patches/@libp2p+crypto): its gossip and handshakes refuse the same forgery', async () => {
    const c = vectors.cases[0]!;
    const ident = vectors.identities.find((i) => i.id === c.signer_id)!;
    const data = Buffer.from(c.signing_input, 'utf8');
    const libp2pKey = await generateKeyPairFromSeed('Ed25519', hex(ident.seed_hex));
    expect(Buffer.from(await libp2pKey.sign(data)).toString('base64')).toBe(c.sig);
    expect(await libp2pKey.publicKey.verify(data, Buffer.from(c.sig, 'base64'))).toBe(true);

    const identity = new Uint8Array(32);
    identity[0] = 1;
    const forged = new Uint8Array(64);
    forged[0] = 1;
    expect(await publicKeyFromRaw(identity).verify(data, forged)).toBe(false);
  });

  it('checks a lone envelope inline: the message path has its verdict without awaiting anything', async () => {
    // Alone in its turn of the event loop (test/unit/verify-thread.test.ts has the busy loop's case).
    const nextTurn = () => new Promise((r) => setImmediate(r));
    await nextTurn();
    expect(checkEnvelope(parseEnvelope(vectors.cases[0]!.wire_json))).toBeUndefined();
    await nextTurn();
    expect(() => checkEnvelope(parseEnvelope(vectors.must_fail[0]!.wire_json))).toThrow(/signature does not verify/);
  });
});

/** The public key bytes (hex) named by a key id. */
function idHex(id: string): string {
  const ident = vectors.identities.find((i) => i.id === id);
  if (ident) return ident.public_key_hex;
  throw new Error(`no vector identity ${id}`);
}
