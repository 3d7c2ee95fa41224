import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { KeyPair } from '../../runtime/crypto/keys.js';
import { signEnvelope, verifyEnvelope } from '../../runtime/crypto/signing.js';
import { canonicalJson, encodeEnvelope, parseEnvelope, signingBytes, SIGNING_PREFIX } from '../../runtime/wire/envelope.js';

interface Vectors {
  identities: { seed_hex: string; public_key_hex: string; id: string; did: string; peer_id: string }[];
  cases: { name: string; signer_id: string; wire_json: string; signing_input: string; sig: string }[];
  must_fail: { name: string; wire_json: string }[];
}
const vectors: Vectors = JSON.parse(readFileSync(new URL('../fixtures/wire-vectors.json', import.meta.url), 'utf8'));
const hex = (h: string) => Uint8Array.from(Buffer.from(h, 'hex'));

describe('identities', () => {
  for (const ident of vectors.identities) {
    it(`derives id, did and peer id from seed ${ident.seed_hex.slice(0, 8)}…`, () => {
      const key = KeyPair.fromSeed(hex(ident.seed_hex));
      expect(Buffer.from(key.publicKey).toString('hex')).toBe(ident.public_key_hex);
      expect(key.id).toBe(ident.id);
      expect(key.did).toBe(ident.did);
      expect(key.peerId).toBe(ident.peer_id);
    });
  }
});

describe('signed cases', () => {
  for (const c of vectors.cases) {
    const ident = vectors.identities.find((i) => i.id === c.signer_id)!;
    const key = KeyPair.fromSeed(hex(ident.seed_hex));

    it(`${c.name}: canonical signing bytes match`, () => {
      const env = parseEnvelope(c.wire_json);
      expect(SIGNING_PREFIX + canonicalJson(env)).toBe(c.signing_input);
      expect(Buffer.from(signingBytes(env)).toString('utf8')).toBe(c.signing_input);
    });

    it(`${c.name}: signature verifies as the node checks it`, async () => {
      const env = parseEnvelope(c.wire_json);
      await expect(verifyEnvelope(env)).resolves.toBeUndefined();
    });

    it(`${c.name}: signing as the node signs reproduces the signature`, async () => {
      const env = parseEnvelope(c.wire_json);
      delete env.sig;
      await signEnvelope(env, key);
      expect(Buffer.from(env.sig!).toString('base64')).toBe(c.sig);
    });

    it(`${c.name}: written and read again, the envelope is the same`, () => {
      const env = parseEnvelope(c.wire_json);
      const again = parseEnvelope(encodeEnvelope(env));
      expect(again).toEqual(env);
      expect(encodeEnvelope(again)).toBe(encodeEnvelope(env));
    });
  }

  it('keeps uint64 extremes exact', () => {
    const env = parseEnvelope(vectors.cases[1].wire_json);
    expect(env.nonce).toBe(18446744073709551615n);
    expect(env.opt.exp).toBe(9007199254740993n);
    expect(encodeEnvelope(env)).toContain('"nonce":18446744073709551615,');
    expect(encodeEnvelope(env)).toContain('"exp":9007199254740993}');
  });
});

describe('must_fail cases', () => {
  for (const c of vectors.must_fail) {
    it(`${c.name}: rejected`, async () => {
      const env = parseEnvelope(c.wire_json);
      await expect(verifyEnvelope(env)).rejects.toThrow(/signature does not verify|does not match/);
    });
  }
});

describe('peer id syntax', () => {
  it('accepts the vectors peer ids and rejects near misses', async () => {
    const { isPeerId } = await import('../../runtime/crypto/keys.js');
    for (const i of vectors.identities) expect(isPeerId(i.peer_id)).toBe(true);
    expect(isPeerId('12D3KooWK99VoVxNE7XzyBwXEzW7xhK7Gpv85r9F3V3fyKSUKPH')).toBe(false);
    expect(isPeerId('not-a-peer-id')).toBe(false);
    expect(isPeerId('')).toBe(false);
    expect(isPeerId('12D3KooWK99VoVxNE7XzyBwXEzW7xhK7Gpv85r9F3V3fyKSUKPH0')).toBe(false);
  });
});
