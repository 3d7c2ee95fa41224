import { noise } from '@chainsafe/libp2p-noise';
import { gossipsub, type GossipSub } from '@libp2p/gossipsub';
import { identify } from '@libp2p/identify';
import type { Libp2p } from '@libp2p/interface';
import { tcp } from '@libp2p/tcp';
import { yamux } from '@libp2p/yamux';
import { multiaddr } from '@multiformats/multiaddr';
import { createLibp2p } from 'libp2p';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { KeyPair } from '../../runtime/crypto/keys.js';
import { signEnvelopeSync } from '../helpers/envelopes.js';
import { silentLogger } from '../../runtime/log.js';
import { Libp2pTransport } from '../../runtime/network/libp2p-transport.js';
import { msToNs, nextNonce, nowNs } from '../../runtime/time.js';
import type { Arrival } from '../../runtime/transport.js';
import { emptyHandle, encodeEnvelope, encodePayload, type Envelope } from '../../runtime/wire/envelope.js';
import { DevEvents, nonceOf, listenAddr, waitFor } from '../helpers/network.js';
import { type LocalNode, startLocalNode } from '../helpers/local-node.js';
import { removeHome } from '../helpers/node.js';

/**
 * Gossip is validated before it is relayed: an envelope that is oversized, unparsable,
 * on the wrong topic or badly signed is rejected by gossipsub's topic validator, so it is
 * neither delivered nor forwarded and its sender's peer score drops; an expired one is
 * ignored (not relayed, no penalty). Without the validator every relay would pass such an
 * envelope on and each node's kernel would refuse it only after the whole mesh carried it.
 */

const TOPIC = '/dms/hello';

function broadcast(key: KeyPair, host: string, o: { be?: string; exp?: bigint; topic?: string } = {}): Envelope {
  return signEnvelopeSync(
    {
      to: emptyHandle(),
      be: o.be ?? '/broadcast/nobody-has-this',
      from: { id: key.id, did: key.did, addr: { host, inbox: 'gossiper' } },
      nonce: nextNonce(),
      opt: { exp: o.exp ?? nowNs() + msToNs(60_000), topic: o.topic ?? TOPIC },
      msg: encodePayload({}),
    },
    key,
  );
}

/** The same envelope with one bit of its signature flipped. */
const forged = (env: Envelope): Envelope => ({ ...env, sig: Uint8Array.from(env.sig!, (b, i) => (i === 0 ? b ^ 1 : b)) });

/** gossipsub's score of `peer` as `node` sees it (the implementation has it; the interface does not). */
const scoreOf = (node: { transport: Libp2pTransport }, peer: string): number =>
  (node.transport.node.services.pubsub as unknown as { getScore(p: string): number }).getScore(peer);

const bytes = (env: Envelope) => Buffer.from(encodeEnvelope(env), 'utf8');

describe('gossip validation, three transports in a line a - b - c', () => {
  interface Node {
    key: KeyPair;
    transport: Libp2pTransport;
    received: { env: Envelope; arrival: Arrival }[];
  }
  let a: Node, b: Node, c: Node;

  beforeAll(async () => {
    const start = async (): Promise<Node> => {
      const key = KeyPair.generate();
      const transport = await Libp2pTransport.create({ keyPair: key, listen: ['/ip4/127.0.0.1/tcp/0'], log: silentLogger() });
      const received: Node['received'] = [];
      transport.onEnvelope((env, arrival) => received.push({ env, arrival }));
      return { key, transport, received };
    };
    [a, b, c] = await Promise.all([start(), start(), start()]);
    await a.transport.connect(b.transport.addrs()[0]);
    await c.transport.connect(b.transport.addrs()[0]);
    for (const n of [a, b, c]) n.transport.subscribe(TOPIC);
    await waitFor('subscriptions to spread along the line', () =>
      a.transport.topicPeers(TOPIC).includes(b.transport.host) &&
      b.transport.topicPeers(TOPIC).includes(c.transport.host) &&
      c.transport.topicPeers(TOPIC).includes(b.transport.host),
    );
  });
  afterAll(() => Promise.all([a, b, c].map((n) => n?.transport.stop())));

  const publishRaw = (data: Uint8Array, topic = TOPIC) => a.transport.node.services.pubsub.publish(topic, data);
  const nonces = (n: Node) => n.received.map((r) => r.env.nonce);

  it('neither delivers nor relays a badly signed, unparsable, misdirected or oversized envelope, and scores its sender down', async () => {
    const sender = a.transport.host;
    expect(scoreOf(b, sender)).toBe(0);
    const bad = [
      forged(broadcast(a.key, sender)),
      broadcast(a.key, sender, { topic: '/dms/other' }), // validly signed, published on another topic
    ];
    for (const env of bad) await publishRaw(bytes(env));
    await publishRaw(Buffer.from('{"not": "an envelope"'));
    await publishRaw(Buffer.alloc(1024 * 1024 + 1, 0x20)); // over the default 1 MiB envelope limit
    // A valid envelope published after them proves the path works: once c has it, the others
    // would have arrived before it.
    const sentinel = broadcast(a.key, sender);
    await publishRaw(bytes(sentinel));
    await waitFor('the valid envelope to reach c', () => nonces(c).includes(sentinel.nonce), { timeoutMs: 20_000, intervalMs: 20 });
    expect(nonces(b)).toEqual([sentinel.nonce]);
    expect(nonces(c)).toEqual([sentinel.nonce]);
    expect(c.received[0].arrival).toEqual({ peer: sender, via: 'gossip', signatureVerified: true });
    // Every rejection counts against the publisher in b's view of it.
    await waitFor('b to score a below zero', () => scoreOf(b, sender) < 0, { timeoutMs: 10_000, intervalMs: 50 });
  });

  it('ignores an expired envelope: not delivered, not relayed', async () => {
    const expired = broadcast(a.key, a.transport.host, { exp: nowNs() - msToNs(1_000) });
    await publishRaw(bytes(expired));
    const sentinel = broadcast(a.key, a.transport.host);
    await publishRaw(bytes(sentinel));
    await waitFor('the valid envelope to reach c', () => nonces(c).includes(sentinel.nonce), { timeoutMs: 20_000, intervalMs: 20 });
    expect(nonces(b)).not.toContain(expired.nonce);
    expect(nonces(c)).not.toContain(expired.nonce);
  });
});

describe('gossip validation on real nodes: a foreign peer publishes to B, C hears only through B', () => {
  let nodeB: LocalNode;
  let nodeC: LocalNode;
  let foreign: Libp2p<{ pubsub: GossipSub; identify: ReturnType<ReturnType<typeof identify>> }>;

  beforeAll(async () => {
    nodeB = await startLocalNode({ env: { DMS_DEBUG: 'true' }, timeoutMs: 45_000 });
    nodeC = await startLocalNode({ env: { DMS_DEBUG: 'true', DMS_NETWORK_BOOTSTRAP_PEERS: listenAddr(nodeB) }, timeoutMs: 45_000 });
    // No DHT, no actor protocol: nobody but B, which it dials, learns it exists.
    foreign = await createLibp2p({
      addresses: { listen: ['/ip4/127.0.0.1/tcp/0'] },
      transports: [tcp()],
      connectionEncrypters: [noise()],
      streamMuxers: [yamux()],
      services: { identify: identify(), pubsub: gossipsub({ allowPublishToZeroTopicPeers: false, emitSelf: false }) },
    });
    foreign.services.pubsub.subscribe(TOPIC);
    await foreign.dial(multiaddr(listenAddr(nodeB)));
  }, 120_000);
  afterAll(async () => {
    await foreign?.stop();
    await Promise.all([nodeB?.stop(), nodeC?.stop()]);
    for (const n of [nodeB, nodeC]) if (n) removeHome(n.home);
  });

  it('B neither delivers nor forwards a forged envelope; C never sees it, while a valid one reaches C', { timeout: 120_000 }, async () => {
    const key = KeyPair.generate();
    const host = foreign.peerId.toString();
    const [watchB, watchC] = await Promise.all([DevEvents.open(nodeB.url, ['envelope', 'dead-letter']), DevEvents.open(nodeC.url, ['envelope', 'dead-letter'])]);
    try {
      const seen = (w: DevEvents, env: Envelope) => w.find((e) => nonceOf(e) === String(env.nonce));
      // C must have joined B's mesh: keep publishing valid envelopes until one reaches C.
      await waitFor('a valid envelope from the foreign peer to reach C through B', async () => {
        const probe = broadcast(key, host);
        await foreign.services.pubsub.publish(TOPIC, bytes(probe)).catch(() => undefined);
        return watchC.waitFor('the probe at C', (e) => nonceOf(e) === String(probe.nonce), 2_000).then(() => true, () => false);
      }, { timeoutMs: 60_000, intervalMs: 100 });

      const bad = forged(broadcast(key, host));
      await foreign.services.pubsub.publish(TOPIC, bytes(bad));
      const sentinel = broadcast(key, host);
      await foreign.services.pubsub.publish(TOPIC, bytes(sentinel));
      await watchC.waitFor('the valid envelope at C', (e) => nonceOf(e) === String(sentinel.nonce));
      await watchB.waitFor('the valid envelope at B', (e) => nonceOf(e) === String(sentinel.nonce));
      expect(seen(watchB, bad)).toBeUndefined();
      expect(seen(watchC, bad)).toBeUndefined();
      // C heard all this through B only.
      expect(foreign.getPeers().map(String)).toEqual([nodeB.peerId]);
    } finally {
      watchB.close();
      watchC.close();
    }
    expect((await fetch(`${nodeB.url}/health`)).status).toBe(200);
  });
});
