import type { Envelope } from './wire/envelope.js';

/** Where an incoming envelope came from, for the checks that depend on it. */
export interface Arrival {
  /** Peer id of the node that handed us the envelope. */
  peer: string;
  via: 'unicast' | 'gossip';
  /** The host (an IPv4 address, an IPv6 /64) of the connection it came on; unicast only. */
  host?: string;
  /** The transport already verified the envelope's signature (gossip validation): the kernel need not again. */
  signatureVerified?: boolean;
}

/**
 * The actor system's view of the network. The kernel routes by `to.addr.host`; everything
 * about libp2p (streams, peer store, DHT, gossipsub) stays behind this seam, so the kernel
 * runs with no network at all (tests, `network.enabled: false`) and with libp2p alike.
 */
export interface Transport {
  /** This node's peer id (the `addr.host` of its actors). */
  readonly host: string;
  /** Multiaddrs this node listens on, each ending in /p2p/<host>. */
  addrs(): string[];
  /** Peer ids currently connected. */
  peers(): string[];
  /** Delivers a signed envelope to the node `env.to.addr.host`; rejects with a DmsError ('unroutable', 'too_large'). */
  send(env: Envelope): Promise<void>;
  /** Publishes a signed broadcast envelope on `env.opt.topic`. */
  publish(env: Envelope): Promise<void>;
  subscribe(topic: string): void;
  unsubscribe(topic: string): void;
  /** Round-trip time to a peer in ms, waited for up to `timeoutMs` (default: the dial timeout); rejects with a DmsError when unreachable. */
  ping(peer: string, timeoutMs?: number): Promise<number>;
  /** Dials a multiaddr; resolves with the peer id reached. */
  connect(multiaddr: string): Promise<string>;
  /** Called when a peer connects or disconnects; returns the unsubscribe. Optional: a network that cannot tell has no such events. */
  onPeer?(handler: (event: { peer: string; connected: boolean }) => void): () => void;
  /**
   * Called for every envelope arriving from the network (already parsed, not yet verified). A
   * promise returned says the envelope is still being admitted: a transport may hold back more
   * of the same peer's envelopes until it settles.
   */
  onEnvelope(handler: (env: Envelope, arrival: Arrival) => unknown): void;
  stop(): Promise<void>;
}
