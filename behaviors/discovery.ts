import { multiaddr } from '@multiformats/multiaddr';
import * as z from 'zod';
import { isPeerId } from '../runtime/crypto/keys.js';
import { MAX_NODE_NAME } from '../runtime/config.js';
import { LabelsSchema, LocationSchema, ResourceSpecSchema } from './jobs/schema.js';
import { EmptyPayload, NodeBehaviors } from './root.js';

/**
 * The discovery catalogue: what a node knows about its peers and how to reach more of them.
 * list and self keep the names the root actor always answered, so existing clients still work.
 */
export const DiscoveryBehaviors = {
  peersList: NodeBehaviors.peersList,
  peersSelf: NodeBehaviors.peersSelf,
  peersPing: '/dms/node/peers/ping',
  peersConnect: '/dms/node/peers/connect',
  /** The peers connected now, each with the profile it last published. */
  peersDescribe: '/dms/node/peers/describe',
  /** This node's published profile: open to anyone (`/public`), so it holds only what an operator would publish. */
  describe: '/public/describe',
  /**
   * A peer says its profile changed (its operator onboarded, offboarded, relabelled or renamed
   * it), so the copy kept of it is asked for again by the next reader. Open to anyone: it only
   * ever outdates the copy of the peer that sent it.
   */
  describeChanged: '/public/describe/changed',
  /** This node's own settings changed: its peers are told (sent by its resource manager). */
  selfChanged: '/dms/node/profile/changed',
} as const;

/** The inbox of the discovery actor. */
export const DISCOVERY_INBOX = 'discovery';

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

// Bounds on what one peer's profile may hold: it is stored per connected peer and repeated in
// every describe reply, so a peer must not be able to make either large.
const MAX_NAME = MAX_NODE_NAME;
const MAX_TEXT = 100;
const MAX_ADDRS = 8;
const MAX_ADDR = 256;
const MAX_EXECUTORS = 16;
const MAX_EXECUTOR = 64;
/** The whole profile as JSON; also caps what the shared schemas leave open (a GPU model). */
export const MAX_PROFILE_BYTES = 8 * 1024;

const text = (max: number) => z.string().max(max);

/**
 * What a node publishes about itself at /public/describe, and what its peers keep of it.
 * `onboarded` is the share offered to the network and `free` what of it is not reserved;
 * both are null on a node that offers nothing (its operator onboarded no share) or runs no
 * resource manager.
 */
export const NodeProfile = z
  .object({
    name: text(MAX_NAME),
    version: text(MAX_TEXT),
    /** Listen multiaddrs, each ending in /p2p/<id>. */
    addrs: z.array(text(MAX_ADDR)).max(MAX_ADDRS),
    location: LocationSchema.extend({ region: text(MAX_TEXT).optional(), country: text(MAX_TEXT).optional(), city: text(MAX_TEXT).optional() }),
    /**
     * The device labels jobs may ask for: a requester places a job asking for labels only on a
     * node whose signed profile shows them, whatever its bid claims. Absent from older nodes' profiles.
     */
    labels: LabelsSchema.default({}),
    onboarded: ResourceSpecSchema.nullable(),
    free: ResourceSpecSchema.nullable(),
    executors: z.array(text(MAX_EXECUTOR)).max(MAX_EXECUTORS),
  })
  .strict()
  .refine((p) => new TextEncoder().encode(JSON.stringify(p)).length <= MAX_PROFILE_BYTES, { error: `a profile is at most ${MAX_PROFILE_BYTES} bytes of JSON` });
export type NodeProfile = z.infer<typeof NodeProfile>;

export const DescribePayload = EmptyPayload;
export const DescribeChangedPayload = EmptyPayload;
export const SelfChangedPayload = EmptyPayload;
/**
 * `fresh`: peers whose profile is asked for again now, however recently it came (a caller about
 * to act on what it says, e.g. refusing a job pinned there); the others as usual.
 */
export const PeersDescribePayload = EmptyPayload.extend({ fresh: z.array(PeerIdText).max(16).optional() });

export const PeerDescription = z.object({
  id: z.string(),
  /** From the hello exchange; null until the peer answered it. */
  did: z.string().nullable(),
  /** The profile the peer last answered with; null until it answered one. */
  profile: NodeProfile.nullable(),
  /** When that answer came (ISO 8601); null with no profile. */
  last_seen: z.string().nullable(),
});
export type PeerDescription = z.infer<typeof PeerDescription>;

/** The peer list (same `peers` and `dids` as /dms/node/peers/list) with each peer described. */
export const PeersDescribeReply = PeerListReply.extend({ nodes: z.array(PeerDescription) });
export type PeersDescribeReply = z.infer<typeof PeersDescribeReply>;
