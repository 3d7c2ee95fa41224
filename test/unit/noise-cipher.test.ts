import { randomBytes } from 'node:crypto';
import { defaultCrypto } from '@chainsafe/libp2p-noise/crypto';
import { LengthPrefixedDecoder } from '@libp2p/utils';
import { Uint8ArrayList } from 'uint8arraylist';
import { describe, expect, it } from 'vitest';
import { sodium } from '../../runtime/crypto/sodium.js';
import { noiseCrypto } from '../../runtime/network/noise-cipher.js';

/*
 * Noise's cipher on libsodium (runtime/network/noise-cipher.ts) against the library's own, which
 * every other libp2p node runs: the same bytes on the wire, each opening what the other sealed.
 */
const bytes = (x: Uint8Array | Uint8ArrayList) => Buffer.from(x instanceof Uint8Array ? x : x.subarray());
const k = randomBytes(32);
const nonce = Buffer.concat([Buffer.alloc(4), Buffer.from([7, 0, 0, 0, 0, 0, 0, 0])]);
const ad = randomBytes(32);
// Both sides of the library's 1,200-byte switch between its two ciphers, and Noise's largest message.
const SIZES = [0, 1, 200, 1199, 1200, 4096, 65535 - 16];

describe('the Noise cipher', () => {
  it('runs on libsodium on this platform', () => {
    expect(sodium()).not.toBeNull();
  });

  for (const size of SIZES) {
    it(`seals ${size} bytes as the library does, and each opens what the other sealed`, () => {
      const plain = randomBytes(size);
      const ours = noiseCrypto.chaCha20Poly1305Encrypt(plain, nonce, ad, k);
      const theirs = defaultCrypto.chaCha20Poly1305Encrypt(plain, nonce, ad, k);
      expect(bytes(ours).equals(bytes(theirs))).toBe(true);
      expect(bytes(noiseCrypto.chaCha20Poly1305Decrypt(Uint8Array.from(bytes(theirs)), nonce, ad, k)).equals(plain)).toBe(true);
      expect(bytes(defaultCrypto.chaCha20Poly1305Decrypt(bytes(ours), nonce, ad, k)).equals(plain)).toBe(true);
    });
  }

  it('seals a message given in pieces (a muxer frame) as the same message whole', () => {
    const plain = randomBytes(5000);
    const pieces = new Uint8ArrayList(plain.subarray(0, 12), plain.subarray(12, 3000), plain.subarray(3000));
    expect(bytes(noiseCrypto.chaCha20Poly1305Encrypt(pieces, nonce, ad, k)).equals(bytes(noiseCrypto.chaCha20Poly1305Encrypt(plain, nonce, ad, k)))).toBe(true);
  });

  it('opens in place when handed the ciphertext\'s own memory, as Noise does with transport messages', () => {
    const plain = randomBytes(65535 - 16);
    const sealed = bytes(defaultCrypto.chaCha20Poly1305Encrypt(plain, nonce, ad, k));
    const dst = sealed.subarray(0, sealed.byteLength - 16);
    const opened = noiseCrypto.chaCha20Poly1305Decrypt(sealed, nonce, ad, k, dst);
    expect(opened).toBe(dst);
    expect(Buffer.from(dst).equals(plain)).toBe(true);
  });

  it('opens a message that arrived in pieces (split across reads), leaving the pieces as they were', () => {
    const plain = randomBytes(20_000);
    const sealed = bytes(noiseCrypto.chaCha20Poly1305Encrypt(plain, nonce, ad, k));
    const first = Uint8Array.from(sealed.subarray(0, 7000));
    const pieces = new Uint8ArrayList(first, Uint8Array.from(sealed.subarray(7000)));
    // A dst that is not the ciphertext's memory is a place to write, not a view to trust.
    const opened = noiseCrypto.chaCha20Poly1305Decrypt(pieces, nonce, ad, k, new Uint8Array(plain.byteLength));
    expect(bytes(opened).equals(plain)).toBe(true);
    expect(Buffer.from(first).equals(sealed.subarray(0, 7000))).toBe(true);
  });

  it('leaves the ciphertext as it was when not handed its memory (the handshake hashes it after opening)', () => {
    const plain = randomBytes(300);
    const message = Buffer.concat([randomBytes(32), bytes(noiseCrypto.chaCha20Poly1305Encrypt(plain, nonce, ad, k))]);
    const before = Buffer.from(message);
    // As the handshake passes it: a list of one piece, a view of the message after its key.
    const opened = noiseCrypto.chaCha20Poly1305Decrypt(new Uint8ArrayList(message).sublist(32), nonce, ad, k);
    expect(bytes(opened).equals(plain)).toBe(true);
    expect(message.equals(before)).toBe(true);
    expect(bytes(noiseCrypto.chaCha20Poly1305Decrypt(message.subarray(32), nonce, ad, k)).equals(plain)).toBe(true);
    expect(message.equals(before)).toBe(true);
  });

  it('refuses a message whose ciphertext, tag, associated data or nonce changed, or that is shorter than a tag', () => {
    const plain = randomBytes(3000);
    const sealed = bytes(noiseCrypto.chaCha20Poly1305Encrypt(plain, nonce, ad, k));
    const flipped = (at: number) => {
      const copy = Buffer.from(sealed);
      copy[at]! ^= 1;
      return copy;
    };
    expect(() => noiseCrypto.chaCha20Poly1305Decrypt(flipped(10), nonce, ad, k)).toThrow();
    expect(() => noiseCrypto.chaCha20Poly1305Decrypt(flipped(sealed.byteLength - 1), nonce, ad, k)).toThrow();
    expect(() => noiseCrypto.chaCha20Poly1305Decrypt(Buffer.from(sealed), nonce, randomBytes(32), k)).toThrow();
    expect(() => noiseCrypto.chaCha20Poly1305Decrypt(Buffer.from(sealed), Buffer.alloc(12), ad, k)).toThrow();
    expect(() => noiseCrypto.chaCha20Poly1305Decrypt(randomBytes(15), nonce, ad, k)).toThrow(/shorter than its tag/);
  });

  it("reads messages without asking the length of an empty buffer (the @libp2p/utils patch: no RangeError made per message)", () => {
    // Noise's reader: a 2-byte big-endian length, then the message. Unpatched, the decoder asked
    // once more after the last whole message, and the answer was a thrown RangeError.
    const asked: number[] = [];
    const decoder = new LengthPrefixedDecoder({
      lengthDecoder: (buf) => {
        asked.push(buf.byteLength);
        if (buf.byteLength < 2) throw new RangeError('Could not decode int16BE');
        const head = buf.subarray(0, 2);
        return (head[0] << 8) + head[1];
      },
      encodingLength: () => 2,
    });
    const message = (n: number) => Buffer.concat([Buffer.from([n >> 8, n & 0xff]), randomBytes(n)]);
    const read = [...decoder.decode(Buffer.concat([message(300), message(5)]))].map((m) => m.byteLength);
    expect(read).toEqual([300, 5]);
    expect(asked).toEqual([302 + 7, 7]);
    // A split length is still waited for.
    const whole = message(40);
    expect([...decoder.decode(whole.subarray(0, 1))]).toEqual([]);
    expect([...decoder.decode(whole.subarray(1))].map((m) => m.byteLength)).toEqual([40]);
  });
});
