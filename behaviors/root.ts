import * as z from 'zod';

/** Names of the root actor's behaviors: the catalogue other nodes and clients call. */
export const NodeBehaviors = {
  hello: '/public/hello',
  status: '/public/status',
  broadcastHello: '/broadcast/hello',
  peersSelf: '/dms/node/peers/self',
  peersList: '/dms/node/peers/list',
} as const;

/** Every node's root actor subscribes here, so one broadcast finds every node. */
export const HELLO_TOPIC = '/dms/hello';

export const EmptyPayload = z.object({}).loose();

export const HelloReply = z.object({ did: z.string() });
export type HelloReply = z.infer<typeof HelloReply>;

export const StatusReply = z.object({
  status: z.literal('ok'),
  did: z.string(),
  peer_id: z.string(),
  version: z.string(),
  uptime_s: z.number(),
  actors: z.array(z.string()),
  peers: z.number(),
});
export type StatusReply = z.infer<typeof StatusReply>;

export const PeerSelfReply = z.object({ id: z.string(), addrs: z.array(z.string()) });
export type PeerSelfReply = z.infer<typeof PeerSelfReply>;

export const PeerListReply = z.object({ peers: z.array(z.string()) });
export type PeerListReply = z.infer<typeof PeerListReply>;
