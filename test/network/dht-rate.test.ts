/**
 * DHT messages are work a peer hands the node at will: each ADD_PROVIDER costs it ~0.2 ms of its
 * one event loop. Found against a running node: 16 identities sending them as fast as they
 * could were all served, 320,000 messages in 8 s, and /health took up to 2.5 s meanwhile. Now
 * each peer, and each host (an IPv4 address or IPv6 /64) whatever identities it dials with, may
 * send only so many a second (`network.DHTMessagesPerSecond`, `…PerHost`); a stream past that
 * is reset, and the node goes on answering an honest peer's questions.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { peerIdFromMultihash, peerIdFromString } from '@libp2p/peer-id';
import { pbStream } from '@libp2p/utils';
import { multiaddr } from '@multiformats/multiaddr';
import { CID } from 'multiformats/cid';
import * as Digest from 'multiformats/hashes/digest';
import { sha256 } from 'multiformats/hashes/sha2';
import { Message, MessageType } from '../../node_modules/@libp2p/kad-dht/dist/src/message/dht.js';
import { listenAddr, stopCluster } from '../helpers/network.js';
import { type NodeProcess, startNode } from '../helpers/node.js';
import { type Identity, startIdentities } from '../helpers/identities.js';

const DHT = '/dms/kad/1.0.0';
/** Small limits, so the test floods past them quickly: 50 a second per peer (burst 250), 100 per host (burst 500). */
const PER_PEER = 50;
const PER_HOST = 100;
let node: NodeProcess;
let honest: Identity;

beforeAll(async () => {
  node = await startNode({ config: { network: { DHTMessagesPerSecond: PER_PEER, DHTMessagesPerSecondPerHost: PER_HOST } } });
  [honest] = await startIdentities(1, { localAddress: '127.0.0.1' });
  expect(await honest.dial(listenAddr(node))).toBe(true);
}, 60_000);
afterAll(async () => {
  await honest?.stop();
  await stopCluster([node].filter(Boolean));
});

const cidOf = async (bytes: Uint8Array) => CID.createV1(0x55, await sha256.digest(bytes));

async function dhtStream(from: Identity) {
  const stream = await from.host.dialProtocol(peerIdFromString(node.peerId), DHT);
  return { pb: pbStream(stream).pb(Message), close: () => stream.close() };
}

/** ADD_PROVIDER for `cids` on one stream, as fast as the stream takes them; how many were written before the stream failed. */
async function flood(from: Identity, cids: CID[]): Promise<number> {
  const me = { id: from.host.peerId.toMultihash().bytes, multiaddrs: [multiaddr('/ip4/127.0.0.1/tcp/1').bytes] };
  let n = 0;
  try {
    const { pb, close } = await dhtStream(from);
    for (; n < cids.length; n++) await pb.write({ type: MessageType.ADD_PROVIDER, key: cids[n]!.bytes, closer: [], providers: [me] }, { signal: AbortSignal.timeout(10_000) });
    await close();
  } catch {
    // Reset by the node.
  }
  return n;
}

/** ADD_PROVIDER for `cids` on one stream, then a PING: whether the node answered it, having handled every record before it (it reads a stream in order). */
async function announce(from: Identity, cids: CID[]): Promise<boolean> {
  const me = { id: from.host.peerId.toMultihash().bytes, multiaddrs: [multiaddr('/ip4/127.0.0.1/tcp/1').bytes] };
  try {
    const { pb, close } = await dhtStream(from);
    for (const cid of cids) await pb.write({ type: MessageType.ADD_PROVIDER, key: cid.bytes, closer: [], providers: [me] }, { signal: AbortSignal.timeout(10_000) });
    await pb.write({ type: MessageType.PING, key: new Uint8Array(0), closer: [], providers: [] });
    await pb.read({ signal: AbortSignal.timeout(20_000) });
    await close();
    return true;
  } catch {
    return false;
  }
}

/** The peers the node names as providers of `cid`, asked by `from`. */
async function providersOf(from: Identity, cid: CID): Promise<string[]> {
  const { pb, close } = await dhtStream(from);
  await pb.write({ type: MessageType.GET_PROVIDERS, key: cid.bytes, closer: [], providers: [] });
  const reply = await pb.read({ signal: AbortSignal.timeout(10_000) });
  await close();
  return reply.providers.map((p) => peerIdFromMultihash(Digest.decode(p.id)).toString());
}

const heldBy = async (id: Identity, cid: CID) => (await providersOf(honest, cid)).includes(id.host.peerId.toString());

describe('DHT messages', () => {
  it('past a peer’s rate reset its stream; a peer on another host is still answered', { timeout: 90_000 }, async () => {
    const PER = 4_000;
    const [flooder] = await startIdentities(1, { localAddress: '127.0.0.3' });
    try {
      expect(await flooder!.dial(listenAddr(node))).toBe(true);
      const keys = await Promise.all(Array.from({ length: PER }, (_, i) => cidOf(Uint8Array.of(1, i >> 8, i & 255))));
      // Unlimited, the stream took all 4,000 (watched failing). The peer may send 250 at once:
      // the rest of what it had written sat in its stream's buffers when the reset came.
      expect(await flood(flooder!, keys)).toBeLessThan(PER);
      expect(await heldBy(flooder!, keys[PER - 1]!)).toBe(false);
      // An honest peer on another host announces and is found, and the node answers REST.
      const mine = await cidOf(Uint8Array.of(9, 9, 9));
      expect(await flood(honest, [mine])).toBe(1);
      await expect.poll(() => providersOf(honest, mine), { timeout: 10_000 }).toContain(honest.host.peerId.toString());
      expect((await fetch(`${node.url}/health`, { signal: AbortSignal.timeout(5_000) })).status).toBe(200);
    } finally {
      await flooder?.stop();
    }
  });

  it('past a host’s rate reset its streams, though each of its identities sends within its own', { timeout: 90_000 }, async () => {
    // 4 identities on one address (the most it may open in a second) send 150 each at once: each
    // within a peer's 250, together past the host's 500. Counted per peer alone, every record is
    // taken (watched failing).
    const EACH = 150;
    const crowd = await startIdentities(4, { localAddress: '127.0.0.2' });
    try {
      for (const id of crowd) expect(await id.dial(listenAddr(node))).toBe(true);
      const keys = await Promise.all(crowd.map((_, k) => Promise.all(Array.from({ length: EACH }, (_, i) => cidOf(Uint8Array.of(2, k, i))))));
      const answered = await Promise.all(crowd.map((id, k) => announce(id, keys[k]!)));
      const whole = await Promise.all(crowd.map((id, k) => heldBy(id, keys[k]![EACH - 1]!)));
      expect(answered.filter(Boolean).length).toBeLessThanOrEqual(3);
      expect(whole.filter(Boolean).length).toBeLessThanOrEqual(3);
      // The identities whose streams were answered had every record taken.
      expect(whole).toEqual(answered);
    } finally {
      await Promise.all(crowd.map((i) => i.stop()));
    }
  });
});
