/**
 * DHT provider records a peer makes up, against a node process: any peer may tell the DHT it
 * provides any CID (`ADD_PROVIDER`), and the node kept every record in memory for its validity
 * (48 h): one peer's 100,000, sent in 13 s over one stream, grew a node from 98 to 413 MB, and
 * 200,000 to 577 MB. Now one peer holds at most 4,096 records there, its oldest going for new
 * ones, and another peer's records stay; and the addresses one peer names are kept to 32.
 */
import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { peerIdFromMultihash, peerIdFromString } from '@libp2p/peer-id';
import { pbStream } from '@libp2p/utils';
import { multiaddr } from '@multiformats/multiaddr';
import { CID } from 'multiformats/cid';
import * as Digest from 'multiformats/hashes/digest';
import { sha256 } from 'multiformats/hashes/sha2';
import { Message, MessageType } from '../../node_modules/@libp2p/kad-dht/dist/src/message/dht.js';
import { MAX_PER_OWNER } from '../../runtime/network/bounded-datastore.js';
import { listenAddr, stopCluster } from '../helpers/network.js';
import { type NodeProcess, startNode } from '../helpers/node.js';
import { type Identity, startIdentities } from '../helpers/identities.js';

const DHT = '/dms/kad/1.0.0';
let node: NodeProcess;
let honest: Identity;
let flooder: Identity;

beforeAll(async () => {
  // Floods of thousands of messages a second are what these cases send: the rate a peer may send
  // them at is dht-rate.test.ts's, lifted here so that what is behind it is reached.
  node = await startNode({ config: { network: { DHTMessagesPerSecond: 1_000_000, DHTMessagesPerSecondPerHost: 1_000_000 } } });
  [honest, flooder] = await startIdentities(2, { localAddress: '127.0.0.1' });
  for (const id of [honest, flooder]) expect(await id.dial(listenAddr(node))).toBe(true);
}, 60_000);
afterAll(async () => {
  await Promise.all([honest, flooder].filter(Boolean).map((i) => i.stop()));
  await stopCluster([node].filter(Boolean));
});

const cidOf = async (bytes: Uint8Array) => CID.createV1(0x55, await sha256.digest(bytes));

/** The DHT's messages on one stream to the node. */
async function dhtStream(from: Identity) {
  const stream = await from.host.dialProtocol(peerIdFromString(node.peerId), DHT);
  return { pb: pbStream(stream).pb(Message), close: () => stream.close() };
}

async function announce(from: Identity, cids: CID[], addrs = [multiaddr('/ip4/127.0.0.1/tcp/1')]): Promise<void> {
  const { pb, close } = await dhtStream(from);
  const me = { id: from.host.peerId.toMultihash().bytes, multiaddrs: addrs.map((a) => a.bytes) };
  for (const cid of cids) await pb.write({ type: MessageType.ADD_PROVIDER, key: cid.bytes, closer: [], providers: [me] });
  // The node handles a stream's messages in order, and other streams' between them: a question
  // after the announcements is answered once it has handled them all.
  await pb.write({ type: MessageType.PING, key: new Uint8Array(0), closer: [], providers: [] });
  await pb.read({ signal: AbortSignal.timeout(30_000) });
  await close();
}

/** The node's answer to GET_PROVIDERS for `cid`: each provider and the addresses it gives for it. */
async function providerInfo(cid: CID): Promise<{ peer: string; addrs: number }[]> {
  const { pb, close } = await dhtStream(honest);
  await pb.write({ type: MessageType.GET_PROVIDERS, key: cid.bytes, closer: [], providers: [] });
  const reply = await pb.read({ signal: AbortSignal.timeout(10_000) });
  await close();
  return reply.providers.map((p) => ({ peer: peerIdFromMultihash(Digest.decode(p.id)).toString(), addrs: p.multiaddrs.length }));
}

/** The peers the node names as providers of `cid`. */
const providersOf = async (cid: CID): Promise<string[]> => (await providerInfo(cid)).map((p) => p.peer);

describe('DHT provider records from one peer', () => {
  it('are held to its share, its oldest going, while another peer’s record stays', { timeout: 90_000 }, async () => {
    const kept = await cidOf(randomBytes(32));
    await announce(honest, [kept]);
    const made = await Promise.all(Array.from({ length: MAX_PER_OWNER + 500 }, () => cidOf(randomBytes(32))));
    await announce(flooder, made);
    expect(await providersOf(kept)).toEqual([honest.host.peerId.toString()]);
    expect(await providersOf(made.at(-1)!)).toEqual([flooder.host.peerId.toString()]);
    // Its first 500 went for its last.
    expect(await providersOf(made[0]!)).toEqual([]);
    expect(await providersOf(made[499]!)).toEqual([]);
    expect(await providersOf(made[500]!)).toEqual([flooder.host.peerId.toString()]);
  });

  it('name at most 32 addresses of their provider, however many its messages name; a message naming more than 64 is refused', { timeout: 60_000 }, async () => {
    // Found by a hostile peer against a running node: libp2p's peer store keeps every address a
    // peer names and checks each new one against each held, so 26 messages naming 1,000 made-up
    // addresses each cost the node 20 s of CPU, /health answered in 4 s.
    let port = 0;
    const made = (n: number) => Array.from({ length: n }, () => multiaddr(`/ip4/10.0.${++port >> 8}.${port & 255}/tcp/4001`));
    // One message naming 1,000 is refused whole (kad-dht's MESSAGE_LIMITS), its stream reset:
    // nothing is recorded.
    const refused = await cidOf(randomBytes(32));
    await expect(announce(flooder, [refused], made(1_000))).rejects.toThrow();
    expect(await providersOf(refused)).toEqual([]);
    // Many messages within the limit, 300 addresses in all: the peer keeps 32 of them.
    const cid = await cidOf(randomBytes(32));
    for (let m = 0; m < 5; m++) await announce(flooder, [cid], made(60));
    const [named] = await providerInfo(cid);
    expect(named?.peer).toBe(flooder.host.peerId.toString());
    expect(named!.addrs).toBeGreaterThan(0);
    expect(named!.addrs).toBeLessThanOrEqual(32);
  });
});

describe('DHT messages from many peers at once', () => {
  it('share the event loop with the rest of the node: no stream is timed out, and /health answers meanwhile', { timeout: 120_000 }, async () => {
    // Found against a running node: a message already read resolves the next read at once, so
    // kad-dht handled a peer's backlog in one unbroken run of microtasks. 16 peers sending
    // ADD_PROVIDER as fast as they could starved the node: /health went unanswered for the
    // whole flood, and kad's own 10-s wait for each stream's next message timed every stream out
    // at ~2,800 messages.
    const PER = 4_000;
    const crowd: Identity[] = [];
    try {
      for (let a = 2; a < 6; a++) crowd.push(...(await startIdentities(4, { localAddress: `127.0.0.${a}` })));
      for (const id of crowd) expect(await id.dial(listenAddr(node))).toBe(true);
      const me = (id: Identity) => ({ id: id.host.peerId.toMultihash().bytes, multiaddrs: [multiaddr('/ip4/127.0.0.1/tcp/1').bytes] });
      const keys = await Promise.all(crowd.map((_, k) => Promise.all(Array.from({ length: PER }, (_, i) => cidOf(Uint8Array.of(k, i >> 8, i & 255))))));
      const health: number[] = [];
      let flooding = true;
      const asking = (async () => {
        while (flooding) {
          const t = Date.now();
          const res = await fetch(`${node.url}/health`, { signal: AbortSignal.timeout(20_000) });
          expect(res.status).toBe(200);
          health.push(Date.now() - t);
          await new Promise((r) => setTimeout(r, 200));
        }
      })();
      const sent = await Promise.all(
        crowd.map(async (id, k) => {
          const { pb, close } = await dhtStream(id);
          let n = 0;
          try {
            for (; n < PER; n++) await pb.write({ type: MessageType.ADD_PROVIDER, key: keys[k]![n]!.bytes, closer: [], providers: [me(id)] });
            await close();
          } catch {
            // Reset by the node, which gave up waiting for the stream's next message.
          }
          return n;
        }),
      );
      flooding = false;
      await asking;
      // Each stream's messages all taken in (a stream is read only as fast as it is handled).
      expect(sent).toEqual(crowd.map(() => PER));
      // Quiet, /health took 10.3 s unpatched and under 1.5 s patched; on a loaded machine (load
      // 10) 6.6 s patched, so only a bound that fails nobody honest is asserted here.
      expect(Math.max(...health)).toBeLessThan(15_000);
    } finally {
      await Promise.all(crowd.map((i) => i.stop()));
    }
  });
});
