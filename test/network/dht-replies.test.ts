/**
 * Replies to the node's own DHT queries. A peer in its routing table is asked for closer peers
 * and providers whenever the node looks something up (a job's output, a peer); kad-dht took
 * whatever a reply named: each closer peer a peer-store write, a routing-table candidate and a
 * peer to ask next. One reply naming 2,000 made-up peers kept the node busy for seconds, 10,000
 * for minutes. A reply naming more than a peer's k-bucket holds (twice over) is now refused
 * whole, and the peer counts as one that did not answer (the kad-dht patch, MESSAGE_LIMITS).
 */
import { generateKeyPair } from '@libp2p/crypto/keys';
import { peerIdFromPrivateKey } from '@libp2p/peer-id';
import { pbStream } from '@libp2p/utils';
import { multiaddr } from '@multiformats/multiaddr';
import { CID } from 'multiformats/cid';
import { sha256 } from 'multiformats/hashes/sha2';
import { afterEach, describe, expect, it } from 'vitest';
import { Message } from '../../node_modules/@libp2p/kad-dht/dist/src/message/dht.js';
import { KeyPair } from '../../runtime/crypto/keys.js';
import { createHost, DEFAULT_DHT_PROTOCOL, type DmsLibp2p } from '../../runtime/network/host.js';
import { waitFor } from '../helpers/network.js';

const hosts: DmsLibp2p[] = [];
afterEach(async () => {
  await Promise.all(hosts.splice(0).map((h) => h.stop()));
});

/** `n` made-up peers, each with one unreachable address, as a reply names them. */
async function madeUpPeers(n: number): Promise<{ id: Uint8Array; multiaddrs: Uint8Array[] }[]> {
  const base = peerIdFromPrivateKey(await generateKeyPair('Ed25519')).toMultihash().bytes;
  return Array.from({ length: n }, (_, i) => {
    const id = base.slice();
    id[id.length - 1] = i & 255;
    id[id.length - 2] = (i >> 8) & 255;
    return { id, multiaddrs: [multiaddr(`/ip4/10.9.${(i >> 8) & 255}.${i & 255}/tcp/4001`).bytes] };
  });
}

/** A node, and a peer in its routing table that answers every DHT query naming `closer`. */
async function askedPeerNaming(closer: { id: Uint8Array; multiaddrs: Uint8Array[] }[]): Promise<{ node: DmsLibp2p; answered: () => number }> {
  const [node, peer] = await Promise.all([createHost({ keyPair: KeyPair.generate() }), createHost({ keyPair: KeyPair.generate() })]);
  hosts.push(node, peer);
  await Promise.all([node.start(), peer.start()]);
  let answered = 0;
  await peer.unhandle(DEFAULT_DHT_PROTOCOL);
  await peer.handle(DEFAULT_DHT_PROTOCOL, async (stream) => {
    const pb = pbStream(stream).pb(Message);
    try {
      for (;;) {
        const asked = await pb.read();
        answered++;
        await pb.write({ type: asked.type, key: asked.key, closer, providers: [] });
      }
    } catch {
      // The node closed the stream.
    }
  });
  await peer.dial(node.getMultiaddrs());
  const table = (node.services.dht as unknown as { routingTable: { size: number } }).routingTable;
  await waitFor('the peer to enter the routing table', () => table.size === 1, { timeoutMs: 10_000, intervalMs: 50 });
  return { node, answered: () => answered };
}

async function lookUp(node: DmsLibp2p): Promise<void> {
  const cid = CID.createV1(0x55, await sha256.digest(new Uint8Array([1, 2, 3])));
  try {
    for await (const _ of node.contentRouting.findProviders(cid, { signal: AbortSignal.timeout(10_000) }));
  } catch {
    // Nobody provides it: the lookup ends empty-handed either way.
  }
}

describe("replies to the node's DHT queries", () => {
  it('are taken when they name what a k-bucket holds: its closer peers are learnt', { timeout: 30_000 }, async () => {
    const { node, answered } = await askedPeerNaming(await madeUpPeers(20));
    await lookUp(node);
    expect(answered()).toBeGreaterThan(0);
    expect((await node.peerStore.all()).length).toBeGreaterThanOrEqual(20);
  });

  it('are refused whole when they name thousands of peers: none of them is learnt', { timeout: 30_000 }, async () => {
    const { node, answered } = await askedPeerNaming(await madeUpPeers(2_000));
    await lookUp(node);
    expect(answered()).toBeGreaterThan(0);
    // The peer that answered, and none of the 2,000 it named.
    expect((await node.peerStore.all()).length).toBeLessThanOrEqual(2);
  });
});
