import { multiaddr } from '@multiformats/multiaddr';
import * as z from 'zod';
import { isPeerId } from '../runtime/crypto/keys.js';
import { EmptyPayload, NodeBehaviors } from './node.js';

/**
 * The discovery catalogue: what a node knows about its peers and how to reach more of them.
 * list and self keep the names the root actor always answered, so existing clients still work.
 */
export const DiscoveryBehaviors = {
  peersList: NodeBehaviors.peersList,
  peersSelf: NodeBehaviors.peersSelf,
  peersPing: '/dms/node/peers/ping',
  peersConnect: '/dms/node/peers/connect',
} as const;

export const PeerListPayload = EmptyPayload;
/**
 * `peers`: ids of the peers connected now. `dids`: the DID each of them gave in the hello
 * exchange, for those that answered it (a peer that is not a DMS node, or not yet greeted,
 * has none).
 */
export const PeerListReply = z.object({
  peers: z.array(z.string()),
  dids: z.record(z.string(), z.string()),
});
export type PeerListReply = z.infer<typeof PeerListReply>;

export const PeerSelfPayload = EmptyPayload;
export const PeerSelfReply = z.object({
  id: z.string(),
  did: z.string(),
  /** Listen multiaddrs, each ending in /p2p/<id>; empty when the network is off. */
  addrs: z.array(z.string()),
});
export type PeerSelfReply = z.infer<typeof PeerSelfReply>;

const PeerIdText = z.string().refine(isPeerId, { error: 'must be a libp2p peer id (12D3KooW…)' });

export const PingPayload = z.object({ host: PeerIdText }).strict();
export type PingPayload = z.infer<typeof PingPayload>;
export const PingReply = z.object({ rtt_ms: z.number().nonnegative() });
export type PingReply = z.infer<typeof PingReply>;

const MultiaddrText = z.string().refine(
  (text) => {
    try {
      // An empty string parses as the empty multiaddr, which names nothing to dial.
      return multiaddr(text).getComponents().length > 0;
    } catch {
      return false;
    }
  },
  { error: 'must be a multiaddr, e.g. /ip4/10.0.0.2/tcp/9000/p2p/12D3KooW…' },
);

export const ConnectPayload = z.object({ address: MultiaddrText }).strict();
export type ConnectPayload = z.infer<typeof ConnectPayload>;
export const ConnectReply = z.object({ peer: z.string() });
export type ConnectReply = z.infer<typeof ConnectReply>;
