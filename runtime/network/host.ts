import { noise } from '@chainsafe/libp2p-noise';
import { bootstrap } from '@libp2p/bootstrap';
import { privateKeyFromRaw } from '@libp2p/crypto/keys';
import { gossipsub, type GossipSub } from '@libp2p/gossipsub';
import { identify, type Identify } from '@libp2p/identify';
import { type Connection, KEEP_ALIVE, type Libp2p, type PeerDiscovery, type PeerId } from '@libp2p/interface';
import { kadDHT, passthroughMapper, type KadDHT } from '@libp2p/kad-dht';
import { ping, type Ping } from '@libp2p/ping';
import { tcp } from '@libp2p/tcp';
import { yamux } from '@libp2p/yamux';
import { createLibp2p, type Libp2pOptions } from 'libp2p';
import { multiaddr } from '@multiformats/multiaddr';
import type { KeyPair } from '../crypto/keys.js';
import { DmsError, errorText, invalid } from '../errors.js';
import type { PeerBans } from './bans.js';
import { noiseCrypto } from './noise-cipher.js';
import { BoundedDatastore, MAX_ENTRIES, MAX_PER_OWNER } from './bounded-datastore.js';
import { GOSSIP_RELAY_RATES, type GossipTally } from './gossip.js';
import { HEADROOM, hostOf, InboundShare, MAX_PENDING } from './inbound-share.js';
import { lookUpSelfOnJoining } from './self-lookup.js';
import { boundPeerAddresses } from './peer-addresses.js';
import { PartialFrames, partialBudget } from './partial-frames.js';
import { GreetedPeers, peerScoreParams } from './score.js';
import { MessageRateLimits, type MessageRates, type ServiceStreamGivenUp, watchServiceStreams } from './service-streams.js';

export const DEFAULT_LISTEN = ['/ip4/127.0.0.1/tcp/0'];
export const DEFAULT_DHT_PROTOCOL = '/dms/kad/1.0.0';
// DMS nodes on a LAN find each other, not every libp2p node that answers the default tag.
const MDNS_SERVICE_TAG = '_dms._udp.local';
// gossipsub's own RPC cap; one RPC can carry several messages (IWANT replies), so it must
// stay well above the envelope limit.
const GOSSIP_DEFAULT_RPC_BYTES = 4 * 1024 * 1024;
/**
 * The peer-store tag on bootstrap peers. Its `keep-alive` prefix is libp2p's own signal: the
 * connection manager never prunes such a peer's connection and redials it when it is lost
 * (RECONNECT below); discovery tags the peers it dials back itself the same way.
 */
export const BOOTSTRAP_TAG = `${KEEP_ALIVE}-dms-bootstrap`;
export const BOOTSTRAP_TAG_VALUE = 50;
/**
 * The topics one peer may be subscribed to, in bytes (each topic its length plus 1,024: 31 topics
 * of up to a KiB here). gossipsub holds a peer's topics while it stays connected, 1 MiB of them
 * by default: a topic of a million CJK characters is 2 MB of heap, on every connection a
 * throwaway identity takes. A DMS node subscribes to a few short topics (hello, deployment, its
 * plugins').
 */
export const GOSSIP_TOPIC_BYTES_PER_PEER = 32 * 1024;
/** Gossip messages from this size up are announced with IDONTWANT. */
const IDONTWANT_MIN_BYTES = 64 * 1024;

/** A gossip message's publisher and sequence number, which are its id under StrictSign. */
export function gossipFastId(msg: { from?: Uint8Array; seqno?: Uint8Array }): string {
  return `${msg.from ? Buffer.from(msg.from.buffer, msg.from.byteOffset, msg.from.byteLength).toString('base64') : ''}/${
    msg.seqno ? Buffer.from(msg.seqno.buffer, msg.seqno.byteOffset, msg.seqno.byteLength).toString('hex') : ''
  }`;
}

/**
 * libp2p's redial of a lost keep-alive peer: a dial at once, then five more after waits of 1,
 * 2, 4, 8 and 16 s (about 30 s in all); then it drops the tag and reports
 * `peer:reconnect-failure`, from which discovery's peer machine redials with its own capped
 * backoff (actors/peer-machine.ts).
 */
const RECONNECT = { reconnectRetries: 5, reconnectRetryInterval: 1_000, reconnectBackoffFactor: 2 };
/**
 * libp2p pings every connection every 10 s and aborts it when a ping waits 5 s, so a peer of a
 * node whose process stalled for a few seconds (a burst of work on two cores, a paused VM), or
 * whose answer queued behind megabytes on the same TCP connection, dropped it, silently on both
 * sides. As rust-libp2p's ping: 20 s before a connection is given up (a dead one within 30 s).
 */
const PING_TIMEOUT_MS = 20_000;
/**
 * Each side of a new connection identifies the other once (the protocols it speaks: the DHT,
 * blocks, tunnels), and libp2p's default gives that 5 s and never asks again: a node that
 * stalled across it kept the connection without knowing what the peer speaks (out of its DHT
 * table, never asked for blocks). The same 20 s as a ping: a peer that does not answer that
 * long is given up by the ping anyway.
 */
const IDENTIFY_TIMEOUT_MS = 20_000;
/**
 * Ping streams a connection may have open each way. libp2p's default of one outbound stream
 * is shared with its connection monitor, whose ping fails when it cannot open one, and a
 * failed monitor ping aborts the connection: a `dms peers ping`, or the monitor's own ping
 * outliving its 10-s interval (PING_TIMEOUT_MS is 20 s), dropped the peer. This node's own
 * pings of a peer share one stream (./pings.ts) and the monitor's (every 10 s, each waiting up
 * to 20 s) overlap three at most; a peer's are accepted with the same room and one to spare.
 */
const PING_STREAMS = { maxOutboundStreams: 4, maxInboundStreams: 5 };
/**
 * Pings a peer, and a host, may send a second (five seconds' worth at once), counted in 32-byte
 * pings. libp2p's handler echoes whatever a ping stream carries, for 10 s a stream: one peer
 * pushing bytes through 5 of them had a node echo 121 MB/s, spending 0.66 of a core, /health
 * taking 38 ms at p50. A node's connection monitor pings every 10 s, and round trips measured
 * for placement are kept for a while (actors/deployment/round-trips.ts).
 */
const PING_RATES: MessageRates = { perPeer: 10, perHost: 40 };
const PING_BYTES = 32;
const PING_PROTOCOL = '/ipfs/ping/1.0.0';

export interface HostOptions {
  /** The node key: the libp2p identity is this key, so peer id = the node's `addr.host`. */
  keyPair: KeyPair;
  /** Multiaddrs to listen on; default 127.0.0.1 on a free TCP port. */
  listen?: string[];
  /** Multiaddrs ending in /p2p/<peer id>, dialled shortly after start and kept connected (BOOTSTRAP_TAG). */
  bootstrap?: string[];
  /** kad-dht protocol id; a private id keeps the DMS DHT apart from the public IPFS one. */
  protocolId?: string;
  enableMdns?: boolean;
  /** Largest envelope the node accepts; sizes gossipsub's RPC cap to fit it. */
  maxEnvelopeBytes?: number;
  /**
   * Inbound connections accepted per second from one IP. libp2p's default (5) is a flood
   * guard that also throttles several nodes started together on one machine.
   */
  inboundConnectionThreshold?: number;
  /** Peers that completed the hello, scored up by gossipsub (score.ts); none when absent. */
  greeted?: GreetedPeers;
  /** Peers refused connections either way while banned (bans.ts); nobody when absent. */
  bans?: PeerBans;
  /** Connections held at once (`network.MaxConnections`); shared between addresses past it (inbound-share.ts). */
  maxConnections?: number;
  /**
   * What inbound streams hold of messages not yet whole, over the node: gossipsub's and the
   * DHT's count here (service-streams.ts), as the actor protocol's do; a budget of its own when absent.
   */
  partials?: PartialFrames;
  /** Told when a gossipsub or DHT stream is reset for the message it held, or a DHT or ping stream for its rate. */
  serviceStreamGivenUp?: ServiceStreamGivenUp;
  /** DHT messages a peer, and a host, may send a second (`network.DHTMessagesPerSecond…`); DEFAULT_DHT_MESSAGE_RATES when absent. */
  dhtMessageRates?: MessageRates;
  /** Gossip messages a peer, and a host, may relay to this node a second; GOSSIP_RELAY_RATES (./gossip.ts) when absent. */
  gossipRelayRates?: MessageRates;
  /** Counts the gossip messages dropped for the relay rates (`over_relay_rate`), with the validator's outcomes. */
  gossipTally?: GossipTally;
}

export interface DmsServices extends Record<string, unknown> {
  identify: Identify;
  ping: Ping;
  dht: KadDHT;
  pubsub: GossipSub;
  mdns?: PeerDiscovery;
}

export type DmsLibp2p = Libp2p<DmsServices>;

/** DHT messages a second by default, per peer and per host (`network.DHTMessagesPerSecond…`). */
export const DEFAULT_DHT_MESSAGE_RATES: MessageRates = { perPeer: 200, perHost: 500 };

/** Connections a node holds at once by default (`network.MaxConnections`): libp2p's own default. */
export const DEFAULT_MAX_CONNECTIONS = 300;

/**
 * The most a stream's reader lets its sender have in flight: a stream's read buffer (libp2p's
 * 4 MiB). yamux grows a window up to 16 MiB by default, while a stream whose reader pauses (a
 * tunnel whose target reads slowly) is aborted once 4 MiB wait unread: with the window no wider
 * than the buffer, a paused stream only stops its sender (test/network/tunnel-backpressure).
 */
export const MAX_STREAM_WINDOW = 4 * 1024 * 1024;

/**
 * Builds the node's libp2p host, not yet started: whoever wires protocol handlers and event
 * listeners does so before `start()`, so no early connection or stream goes unseen.
 */
export async function createHost(opts: HostOptions): Promise<DmsLibp2p> {
  const { keyPair, bans } = opts;
  const maxConnections = opts.maxConnections ?? DEFAULT_MAX_CONNECTIONS;
  const share = new InboundShare(maxConnections);
  const listen = opts.listen?.length ? opts.listen : DEFAULT_LISTEN;
  checkAddresses('listen', listen, false);
  checkAddresses('bootstrap', opts.bootstrap ?? [], true);
  const raw = new Uint8Array(keyPair.seed.length + keyPair.publicKey.length);
  raw.set(keyPair.seed, 0);
  raw.set(keyPair.publicKey, keyPair.seed.length);
  const privateKey = privateKeyFromRaw(raw);

  const relayed = new MessageRateLimits(opts.gossipRelayRates ?? GOSSIP_RELAY_RATES);
  // The node exists only once its services are made; a message arrives only after it does.
  let connectionsOf: (peer: PeerId) => Connection[] = () => [];
  const hostOfPeer = (peer: PeerId) => {
    const connection = connectionsOf(peer).at(0);
    return connection && hostOf(connection.remoteAddr);
  };
  const services: Libp2pOptions<DmsServices>['services'] = {
    identify: identify({ timeout: IDENTIFY_TIMEOUT_MS }),
    ping: ping(PING_STREAMS),
    dht: kadDHT({
      protocol: opts.protocolId ?? DEFAULT_DHT_PROTOCOL,
      // Every DMS node serves the private DHT: libp2p's automatic mode would keep nodes
      // without a public address (a LAN, loopback tests) in client mode, with empty tables.
      clientMode: false,
      // The default mapper drops private and loopback addresses, which are exactly the
      // addresses of a LAN or single-machine network.
      peerInfoMapper: passthroughMapper,
      // With no DHT peer, a lookup finds nothing at once instead of waiting for one: a dial by
      // peer id of a node whose address is not known here (down since this node started) waited
      // out its caller's whole timeout in the lookup, `dms jobs get` of a job whose provider is
      // down 65 s, `dms peers ping` of a node that is down 30 s. The DHT's first lookup of this
      // node's own id, which waited for a peer too, is made again once one comes (./self-lookup.ts).
      allowQueryWithZeroPeers: true,
    }),
    pubsub: gossipsub({
      // A lone node (or the first of a network) must still be able to broadcast.
      allowPublishToZeroTopicPeers: true,
      // The kernel delivers a node's own broadcasts locally; an echo would deliver twice.
      emitSelf: false,
      maxInboundDataLength: Math.max(GOSSIP_DEFAULT_RPC_BYTES, 2 * (opts.maxEnvelopeBytes ?? 0)),
      maxTopicBytesPerPeer: GOSSIP_TOPIC_BYTES_PER_PEER,
      // Every mesh peer relays a message to every other, so a node hears each one from several
      // peers; unless a copy is recognised before validation, each copy costs an Ed25519
      // check. A message's id under StrictSign is its publisher and sequence number, so those
      // recognise it. Only copies of a message that passed validation are recognised.
      fastMsgIdFn: gossipFastId,
      // IDONTWANT (gossipsub 1.2) saves receiving a large message twice, by telling every mesh
      // peer on receipt; for envelopes of a few KiB, now dropped as copies before validation,
      // the announcement costs as much as the copy it saves.
      idontwantMinDataSize: IDONTWANT_MIN_BYTES,
      // gossipsub's defaults penalise every peer on an IP that many identities visited, for an
      // hour: loopback, a LAN or one NAT would cut genuine nodes off (score.ts).
      scoreParams: peerScoreParams(opts.greeted ?? new GreetedPeers()),
      // Before a message's signature is checked (patches/@libp2p+gossipsub: gossip.ts says why).
      acceptMessage: (from) => {
        if (relayed.take(from.toString(), hostOfPeer(from))) return true;
        if (opts.gossipTally) opts.gossipTally.over_relay_rate++;
        return false;
      },
    }),
  };
  // Loaded only when asked for: it is off by default, and its DNS packet code weighs on every start.
  if (opts.enableMdns) services.mdns = (await import('@libp2p/mdns')).mdns({ serviceTag: MDNS_SERVICE_TAG });

  const node: DmsLibp2p = await createLibp2p<DmsServices>({
    start: false,
    privateKey,
    datastore: new BoundedDatastore(MAX_ENTRIES, MAX_PER_OWNER, keyPair.peerId),
    addresses: { listen },
    transports: [tcp()],
    connectionEncrypters: [noise({ crypto: noiseCrypto })],
    streamMuxers: [yamux({ streamOptions: { maxStreamWindowSize: MAX_STREAM_WINDOW } })],
    connectionManager: {
      inboundConnectionThreshold: opts.inboundConnectionThreshold,
      maxConnections: maxConnections + HEADROOM,
      maxIncomingPendingConnections: MAX_PENDING + HEADROOM,
      ...RECONNECT,
    },
    connectionMonitor: { pingTimeout: { minTimeout: PING_TIMEOUT_MS } },
    connectionGater: {
      denyInboundConnection: (maConn) => share.denyHandshake(maConn),
      // Checked once the remote peer is known (after Noise), before any protocol runs.
      denyInboundEncryptedConnection: (peer, maConn) => {
        share.handshakeEnded(maConn);
        return bans?.isBanned(peer.toString()) ?? false;
      },
      ...(bans && {
        denyDialPeer: (peer) => bans.isBanned(peer.toString()),
        denyOutboundEncryptedConnection: (peer) => bans.isBanned(peer.toString()),
      }),
    },
    // libp2p waits 1 s before dialling bootstrap peers by default, which only delays joining.
    // Its own tag means nothing to the connection manager; ours keeps the peers connected.
    peerDiscovery: opts.bootstrap?.length ? [bootstrap({ list: opts.bootstrap, timeout: 100, tagName: BOOTSTRAP_TAG, tagValue: BOOTSTRAP_TAG_VALUE })] : [],
    services,
  });

  connectionsOf = (peer) => node.getConnections(peer);
  if (node.peerId.toString() !== keyPair.peerId) {
    throw new DmsError('internal', `libp2p peer id ${node.peerId} differs from the node key's ${keyPair.peerId}`);
  }
  node.addEventListener('connection:open', (e) => share.opened(e.detail, node.getConnections()));
  const dhtProtocol = opts.protocolId ?? DEFAULT_DHT_PROTOCOL;
  watchServiceStreams(node, {
    framed: (p) => p === dhtProtocol || p.startsWith('/meshsub/'),
    partials: opts.partials ?? new PartialFrames(partialBudget(opts.maxEnvelopeBytes ?? 0)),
    gaveUp: opts.serviceStreamGivenUp,
    rated: [
      { protocol: (p) => p === dhtProtocol, limits: new MessageRateLimits(opts.dhtMessageRates ?? DEFAULT_DHT_MESSAGE_RATES), per: 'message' },
      { protocol: (p) => p === PING_PROTOCOL, limits: new MessageRateLimits(PING_RATES), per: { bytes: PING_BYTES } },
    ],
  });
  boundPeerAddresses(node.peerStore);
  lookUpSelfOnJoining(node, dhtProtocol);
  if (node.services.mdns) dialDiscovered(node, node.services.mdns);
  return node;
}

// libp2p reports a bad listen address only when starting, and skips a bad bootstrap address
// with a debug line: a typo in the config would leave a node silently alone.
function checkAddresses(kind: 'listen' | 'bootstrap', addresses: string[], needsPeer: boolean): void {
  for (const address of addresses) {
    try {
      multiaddr(address);
    } catch (e) {
      throw invalid(`${kind} address '${address}' is not a multiaddr: ${errorText(e)}`);
    }
    if (needsPeer && !/\/p2p\/[^/]+$/.test(address)) {
      throw invalid(`${kind} address '${address}' must end in /p2p/<peer id>`);
    }
  }
}

// libp2p only records discovered peers in the peer store; an mDNS neighbour is worth a
// connection at once, so gossip reaches it and discovery can greet it.
function dialDiscovered(node: DmsLibp2p, discovery: PeerDiscovery): void {
  const log = node.logger.forComponent('dms:host');
  discovery.addEventListener('peer', (evt) => {
    const { id, multiaddrs } = evt.detail;
    if (node.status !== 'started' || id.equals(node.peerId) || node.getConnections(id).length > 0) return;
    node.dial(multiaddrs.length ? multiaddrs : id).catch((e: unknown) => log('could not dial mDNS peer %p - %e', id, e));
  });
}
