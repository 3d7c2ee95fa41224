/**
 * gossipsub checks each message's publisher signature before anything of the node sees it, so a
 * peer relaying messages as fast as it could cost the node that check on every one (~65 µs),
 * however the node's own validator then refused them. Now one peer may relay 1,000 messages a
 * second to the node and all the peers on one host 2,000, five seconds' worth at once; past that
 * a message is dropped before gossipsub validates it (patches/@libp2p+gossipsub: `acceptMessage`).
 * Shown here at lower rates, which a flooder sharing this process's event loop goes past.
 */
import { noise } from '@chainsafe/libp2p-noise';
import { gossipsub, type GossipSub } from '@libp2p/gossipsub';
import { identify } from '@libp2p/identify';
import { tcp, type TCPSocketOptions } from '@libp2p/tcp';
import { yamux } from '@libp2p/yamux';
import type { Libp2p } from '@libp2p/interface';
import { multiaddr } from '@multiformats/multiaddr';
import { createLibp2p } from 'libp2p';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { KeyPair } from '../../runtime/crypto/keys.js';
import { silentLogger } from '../../runtime/log.js';
import { Libp2pTransport } from '../../runtime/network/libp2p-transport.js';
import { msToNs, nextNonce, nowNs } from '../../runtime/time.js';
import { emptyHandle, encodeEnvelope, encodePayload } from '../../runtime/wire/envelope.js';
import { signEnvelopeSync } from '../helpers/envelopes.js';
import { waitFor } from '../helpers/network.js';

const TOPIC = '/dms/hello';
const RATES = { perPeer: 200, perHost: 400 };
let transport: Libp2pTransport;
let flooder: Libp2p<{ pubsub: GossipSub }>;
/** Messages of received RPCs gossipsub went on to validate. */
let validated = 0;

beforeAll(async () => {
  // Rates below what a flooder in this process reaches (the node's own: GOSSIP_RELAY_RATES).
  transport = await Libp2pTransport.create({ keyPair: KeyPair.generate(), listen: ['/ip4/127.0.0.1/tcp/0'], log: silentLogger(), gossipRelayRates: RATES });
  await transport.subscribe(TOPIC);
  const pubsub = transport.node.services.pubsub as unknown as { validateReceivedMessage(...a: unknown[]): Promise<unknown> };
  const validate = pubsub.validateReceivedMessage.bind(pubsub);
  pubsub.validateReceivedMessage = (...a) => (validated++, validate(...a));
  flooder = await createLibp2p({
    transports: [tcp({ dialOpts: { localAddress: '127.0.0.8' } as TCPSocketOptions })],
    connectionEncrypters: [noise()],
    streamMuxers: [yamux()],
    services: { identify: identify(), pubsub: gossipsub({ allowPublishToZeroTopicPeers: false, emitSelf: false }) },
  });
  flooder.services.pubsub.subscribe(TOPIC);
  await flooder.dial(multiaddr(transport.node.getMultiaddrs()[0]!));
  await waitFor('the node’s subscription known to the flooder', async () => flooder.services.pubsub.getSubscribers(TOPIC).length > 0, { timeoutMs: 20_000 });
}, 60_000);
afterAll(async () => {
  await flooder?.stop();
  await transport?.stop();
});

describe('gossip relayed by one peer', () => {
  it('is validated at its rate: past it a message is dropped before gossipsub checks its signature', { timeout: 60_000 }, async () => {
    const COUNT = 6_000;
    const { perPeer } = RATES;
        // Valid envelopes, signed ahead: the node's validator ignores those past their publisher's
    // rate without counting them against the peer, so nothing but the relay rate stops the flood
    // before gossipsub's check (junk would have the peer graylisted within a few hundred).
    const key = KeyPair.generate();
    const host = flooder.peerId.toString();
    const flood = Array.from({ length: COUNT }, () =>
      Buffer.from(encodeEnvelope(signEnvelopeSync({ to: emptyHandle(), be: '/broadcast/nobody-has-this', from: { id: key.id, did: key.did, addr: { host, inbox: 'g' } }, nonce: nextNonce(), opt: { exp: nowNs() + msToNs(120_000), topic: TOPIC }, msg: encodePayload({}) }, key))),
    );
    const started = Date.now();
    for (const data of flood) await flooder.services.pubsub.publish(TOPIC, data);
    let seen = -1;
    await waitFor('the node to take in what reached it', async () => seen === (seen = validated), { timeoutMs: 30_000, intervalMs: 1_000 });
    const seconds = (Date.now() - started) / 1000;
    // Unlimited, all 6,000 were validated (watched failing); five seconds' worth at once, then the rate.
    expect(validated).toBeGreaterThanOrEqual(perPeer * 5);
    expect(validated).toBeLessThanOrEqual(perPeer * 5 + perPeer * seconds + 1);
    expect(validated).toBeLessThan(COUNT);
  });
});
