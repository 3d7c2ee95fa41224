import type { ICryptoInterface } from '@chainsafe/libp2p-noise';
import { defaultCrypto } from '@chainsafe/libp2p-noise/crypto';
import { sodium } from '../crypto/sodium.js';

/*
 * Noise's ChaCha20-Poly1305 (every byte between two nodes passes through it twice) on libsodium.
 * The library's own choice: under 1,200 bytes a WebAssembly cipher, 7–22 µs to seal and open one
 * envelope-sized message here (libsodium 2.3–4.3 µs); above it node:crypto, with a cipher object
 * made for every message and its output allocated twice on sealing (the update, then one buffer
 * with the tag) and once on opening. Here a message is sealed into one buffer and opened in
 * place where Noise gives up the buffer it came in. Measured over a libp2p stream (both hosts,
 * one process): a 512-byte request and reply 100 µs of CPU instead of 126, 2 KiB 94 instead of
 * 144. For 64 KiB messages the cipher's own speed is the same either way (1.6–1.7 ms per MiB
 * sealed and opened).
 *
 * The ciphertexts are the same bytes (RFC 8439's IETF ChaCha20-Poly1305;
 * test/unit/noise-cipher.test.ts seals and opens against the library's own), so a peer cannot
 * tell which side runs which.
 */

const TAG_BYTES = 16;

/**
 * Noise's crypto with its cipher on libsodium; the library's own where libsodium does not load.
 * libsodium loads with the first message sealed or opened: a node that never connects to a peer
 * (and every `dms` command) does not carry it.
 */
export const noiseCrypto: ICryptoInterface = {
  ...defaultCrypto,
  chaCha20Poly1305Encrypt(plaintext, nonce, ad, k) {
    const lib = sodium();
    if (!lib) return defaultCrypto.chaCha20Poly1305Encrypt(plaintext, nonce, ad, k);
    const out = Buffer.allocUnsafe(plaintext.byteLength + TAG_BYTES);
    if (plaintext instanceof Uint8Array) {
      lib.crypto_aead_chacha20poly1305_ietf_encrypt(out, plaintext, ad, null, nonce, k);
    } else {
      // A muxer's frame arrives in pieces (header, body): gathered where the ciphertext goes
      // and sealed in place, so the pieces are copied once and nothing else is allocated.
      let at = 0;
      for (const piece of plaintext) {
        out.set(piece, at);
        at += piece.byteLength;
      }
      lib.crypto_aead_chacha20poly1305_ietf_encrypt(out, out.subarray(0, at), ad, null, nonce, k);
    }
    return out;
  },
  chaCha20Poly1305Decrypt(ciphertext, nonce, ad, k, dst) {
    const lib = sodium();
    if (!lib) return defaultCrypto.chaCha20Poly1305Decrypt(ciphertext, nonce, ad, k, dst);
    if (ciphertext.byteLength < TAG_BYTES) throw new Error('a Noise message is shorter than its tag');
    const length = ciphertext.byteLength - TAG_BYTES;
    const pieces = ciphertext instanceof Uint8Array ? [ciphertext] : [...ciphertext];
    if (pieces.length === 1) {
      const sealed = pieces[0]!;
      // Opened in place when `dst` is the ciphertext's own memory (Noise gives up a transport
      // message's ciphertext so); else into a new buffer, leaving the ciphertext as it was
      // (the handshake hashes its ciphertexts after opening them).
      const out = dst?.byteLength === length && dst.buffer === sealed.buffer && dst.byteOffset === sealed.byteOffset ? dst : Buffer.allocUnsafe(length);
      lib.crypto_aead_chacha20poly1305_ietf_decrypt(out, null, sealed, ad, nonce, k);
      return out;
    }
    // A message split across reads: its pieces gathered once, where the plaintext goes (`dst`
    // when it shares no memory with them), and opened there.
    const out = dst?.byteLength === length && pieces.every((p) => p.buffer !== dst.buffer) ? dst : Buffer.allocUnsafe(length);
    let at = 0;
    for (const piece of pieces) {
      if (at >= length) break;
      const take = Math.min(piece.byteLength, length - at);
      out.set(take === piece.byteLength ? piece : piece.subarray(0, take), at);
      at += take;
    }
    lib.crypto_aead_chacha20poly1305_ietf_decrypt_detached(out, null, out, ciphertext.subarray(length), ad, nonce, k);
    return out;
  },
};
