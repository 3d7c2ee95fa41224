/**
 * A foreign gossipsub peer, as an attacker or another implementation runs one: a bare host
 * (TCP, Noise, yamux, identify, gossipsub) dialling from the address it is given, subscribed to
 * one topic, and the valid broadcasts it publishes, signed ahead so that signing is not what a
 * flood's pace measures.
 */
import '../../runtime/polyfills.js';
import { noise } from '@chainsafe/libp2p-noise';
import { gossipsub, type GossipSub } from '@libp2p/gossipsub';
import { identify } from '@libp2p/identify';
import type { Libp2p } from '@libp2p/interface';
import { tcp, type TCPSocketOptions } from '@libp2p/tcp';
import { yamux } from '@libp2p/yamux';
import { multiaddr } from '@multiformats/multiaddr';
import { createLibp2p } from 'libp2p';
import { KeyPair } from '../../runtime/crypto/keys.js';
import { msToNs, nextNonce, nowNs } from '../../runtime/time.js';
import { emptyHandle, encodeEnvelope, encodePayload } from '../../runtime/wire/envelope.js';
import { signEnvelopeSync } from './envelopes.js';
import { waitFor } from './network.js';

export type Gossiper = Libp2p<{ pubsub: GossipSub }>;

/** A gossipsub peer dialling `target` from `address`, subscribed to `topic`, once it knows the target subscribes too. */
export async function startGossiper(target: string, address: string, topic: string): Promise<Gossiper> {
  const peer = await createLibp2p({
    transports: [tcp({ dialOpts: { localAddress: address } as TCPSocketOptions })],
    connectionEncrypters: [noise()],
    streamMuxers: [yamux()],
    services: { identify: identify(), pubsub: gossipsub({ allowPublishToZeroTopicPeers: false, emitSelf: false }) },
  });
  peer.services.pubsub.subscribe(topic);
  await peer.dial(multiaddr(target));
  await waitFor('the target’s subscription known to the peer', async () => peer.services.pubsub.getSubscribers(topic).length > 0, { timeoutMs: 20_000 });
  return peer;
}

/** `count` broadcasts on `topic` to `be` (by default a behavior nobody has), signed ahead by one key, with `peer` as their host. */
export function signedBroadcasts(peer: Libp2p, topic: string, count: number, be = '/broadcast/nobody-has-this'): Buffer[] {
  const key = KeyPair.generate();
  const host = peer.peerId.toString();
  return Array.from({ length: count }, () =>
    Buffer.from(encodeEnvelope(signEnvelopeSync({ to: emptyHandle(), be, from: { id: key.id, did: key.did, addr: { host, inbox: 'g' } }, nonce: nextNonce(), opt: { exp: nowNs() + msToNs(120_000), topic }, msg: encodePayload({}) }, key))),
  );
}
