import { gossipsub } from '@libp2p/gossipsub';
import { identify } from '@libp2p/identify';
import { tcp } from '@libp2p/tcp';
import { yamux } from '@libp2p/yamux';
import { noise } from '@chainsafe/libp2p-noise';
import { createLibp2p, type Libp2p } from 'libp2p';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { KeyPair } from '../../runtime/crypto/keys.js';
import { createHost, type DmsLibp2p, GOSSIP_TOPIC_BYTES_PER_PEER } from '../../runtime/network/host.js';
import { waitFor } from '../helpers/network.js';

/*
 * A peer's gossipsub subscriptions are held for as long as its connection lasts. gossipsub keeps
 * one peer's topics within a budget of bytes (each topic its length plus 1,024), 1 MiB by
 * default: a topic of a million CJK characters is 2 MB of the node's heap, and identities cost
 * nothing, so every connection the node takes could hold that much. A DMS node subscribes to a
 * few short topics (the hello and deployment topics, and its plugins'), so a peer's share is far
 * smaller here.
 */

const HELLO = '/dms/hello';
setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as () => void;
/** Bytes of ArrayBuffers still reachable once collected: where a read RPC's bytes live. */
const heldBuffers = () => {
  gc();
  gc();
  return process.memoryUsage().arrayBuffers;
};
const FLOOD = Array.from({ length: 200 }, (_, i) => `/flood/${i}/`.padEnd(4096, 'x'));
const HUGE = '/' + '中'.repeat(1_000_000);

type GossipHost = Libp2p<{ pubsub: ReturnType<ReturnType<typeof gossipsub>> }>;
const gossipHost = async (): Promise<GossipHost> => {
  const host = await createLibp2p({
    transports: [tcp()],
    connectionEncrypters: [noise()],
    streamMuxers: [yamux()],
    services: { identify: identify(), pubsub: gossipsub({ allowPublishToZeroTopicPeers: true }) },
  });
  await host.start();
  return host;
};

describe("a peer's gossip subscriptions", () => {
  let victim: DmsLibp2p;
  let attacker: GossipHost;

  beforeAll(async () => {
    victim = await createHost({ keyPair: KeyPair.generate() });
    await victim.start();
    victim.services.pubsub.subscribe(HELLO);
    // An ordinary gossipsub host, whose own topics are not bounded: it announces every topic
    // it subscribes to, in the order it subscribed, as soon as it connects.
    attacker = await gossipHost();
    for (const topic of [HELLO, ...FLOOD, HUGE]) attacker.services.pubsub.subscribe(topic);
    await attacker.dial(victim.getMultiaddrs());
  }, 30_000);

  afterAll(async () => {
    await attacker?.stop();
    await victim?.stop();
  });

  it('are held only within a small share of the node: a flood of long topics is dropped past it', async () => {
    const peer = attacker.peerId.toString();
    const heard = (topic: string) => victim.services.pubsub.getSubscribers(topic).some((p) => p.toString() === peer);
    await waitFor("the node to hear the attacker's subscriptions", () => heard(HELLO), { timeoutMs: 10_000, intervalMs: 50 });
    const held = [...FLOOD, HUGE].filter(heard);
    const bytes = held.reduce((n, t) => n + t.length + 1024, 1024 + HELLO.length);
    expect(bytes).toBeLessThanOrEqual(GOSSIP_TOPIC_BYTES_PER_PEER);
    expect(heard(HUGE)).toBe(false);
    // The share still holds every topic a DMS node has and more: its first topics are kept.
    expect(held.length).toBeGreaterThanOrEqual(4);
    expect(held).toEqual(FLOOD.slice(0, held.length));
  });

  it('are not held once read: the last RPC a peer sent is dropped while the node waits for its next', async () => {
    // A peer that shares no topic with the node sends its subscriptions and then nothing: no
    // GRAFT, no gossip. Its one RPC is ~3 MB (a topic of a million CJK characters). gossipsub's
    // read loop kept the last RPC read, as bytes twice over, until the peer sent another: up to
    // its 4 MiB bound several times over on every connection a throwaway identity takes.
    const quiet = await gossipHost();
    try {
      quiet.services.pubsub.subscribe('/quiet');
      quiet.services.pubsub.subscribe('/quiet/' + '中'.repeat(1_000_000));
      const before = heldBuffers();
      await quiet.dial(victim.getMultiaddrs());
      const peer = quiet.peerId.toString();
      await waitFor("the node to read the quiet peer's subscriptions", () => victim.services.pubsub.getSubscribers('/quiet').some((p) => p.toString() === peer), { timeoutMs: 10_000, intervalMs: 50 });
      expect(heldBuffers() - before).toBeLessThan(256 * 1024);
    } finally {
      await quiet.stop();
    }
  });
});
