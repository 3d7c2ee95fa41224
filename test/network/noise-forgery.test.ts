/**
 * Noise on a real node (its cipher is libsodium's, runtime/network/noise-cipher.ts) against a
 * stock libp2p peer (the library's own cipher): they talk, byte for byte; and a peer that forges
 * its transport messages after the handshake (a bit flipped, a message shorter than its tag, the
 * tag cut off) loses its connection while the node goes on serving.
 */
import type { Uint8ArrayList } from 'uint8arraylist';
import { noise } from '@chainsafe/libp2p-noise';
import { defaultCrypto } from '@chainsafe/libp2p-noise/crypto';
import { identify } from '@libp2p/identify';
import { ping } from '@libp2p/ping';
import { tcp } from '@libp2p/tcp';
import { yamux } from '@libp2p/yamux';
import { multiaddr } from '@multiformats/multiaddr';
import { createLibp2p } from 'libp2p';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { listenAddr } from '../helpers/network.js';
import { removeHome, startNode, type NodeProcess } from '../helpers/node.js';

let node: NodeProcess;

beforeAll(async () => {
  node = await startNode();
}, 60_000);

afterAll(async () => {
  await node?.stop();
  if (node) removeHome(node.home);
});

/** A stock peer whose sealed messages pass through `forge` once `forging` is set. */
async function stockPeer(forge: (sealed: Uint8Array) => Uint8Array) {
  const state = { forging: false };
  const crypto = {
    ...defaultCrypto,
    chaCha20Poly1305Encrypt(plaintext: Uint8Array | Uint8ArrayList, nonce: Uint8Array, ad: Uint8Array, k: Uint8Array) {
      const sealed = defaultCrypto.chaCha20Poly1305Encrypt(plaintext, nonce, ad, k);
      return state.forging ? forge(sealed instanceof Uint8Array ? sealed : sealed.subarray()) : sealed;
    },
  };
  const peer = await createLibp2p({
    transports: [tcp()],
    connectionEncrypters: [noise({ crypto })],
    streamMuxers: [yamux()],
    services: { identify: identify(), ping: ping() },
  });
  return { peer, state };
}

const FORGERIES: [string, (sealed: Uint8Array) => Uint8Array][] = [
  ['one bit of the ciphertext flipped', (c) => Uint8Array.from(c, (b, i) => (i === 0 ? b ^ 1 : b))],
  ['a message shorter than its tag', () => new Uint8Array(7)],
  ['the tag cut off', (c) => c.subarray(0, c.byteLength - 16)],
];

it.each(FORGERIES)('a peer that sends %s after the handshake is cut off; the node serves on', async (_, forge) => {
  const { peer, state } = await stockPeer(forge);
  try {
    const conn = await peer.dial(multiaddr(listenAddr(node)));
    // Unforged, the stock cipher and the node's agree: a ping goes there and back.
    expect(await peer.services.ping.ping(conn.remotePeer)).toBeGreaterThanOrEqual(0);
    const closed = new Promise<void>((resolve) => conn.addEventListener('close', () => resolve(), { once: true }));
    state.forging = true;
    void peer.services.ping.ping(conn.remotePeer).catch(() => undefined);
    await expect(Promise.race([closed.then(() => 'closed'), new Promise((r) => setTimeout(() => r('still open after 5 s'), 5_000))])).resolves.toBe('closed');
    expect((await fetch(`${node.url}/health`)).status).toBe(200);
  } finally {
    await peer.stop();
  }
});

it('a new stock peer still connects and is answered after the forgers', async () => {
  const { peer } = await stockPeer((c) => c);
  try {
    const conn = await peer.dial(multiaddr(listenAddr(node)));
    expect(await peer.services.ping.ping(conn.remotePeer)).toBeGreaterThanOrEqual(0);
  } finally {
    await peer.stop();
  }
});
