import type { GossipsubMessage } from '@libp2p/gossipsub';
import type { Connection, PeerId, Stream, StreamCloseEvent } from '@libp2p/interface';
import { peerIdFromString } from '@libp2p/peer-id';
import { multiaddr, type Multiaddr } from '@multiformats/multiaddr';
import { DmsError, errorText, invalid } from '../errors.js';
import { LogGate } from '../log.js';
import { stageEnd, stageMark, stageStart } from '../stage-timings.js';
import type { Arrival, Transport } from '../transport.js';
import { encodeEnvelope, parseEnvelope, type Envelope } from '../wire/envelope.js';
import { type BanPolicy, DEFAULT_BAN_POLICY, PeerBans, RATE_RESET_STRIKES } from './bans.js';
import { OutboundChannels } from './channel.js';
import { encodeFrame, frameText, utf8Length } from './frames.js';
import { type PartialEnd, PartialFrames, partialBudget } from './partial-frames.js';
import { givenUpText, type RateEnd, type ServiceStreamGivenUp } from './service-streams.js';
import { readActorStream } from './actor-stream.js';
import { FairIntake } from './fair-intake.js';
import { hostOf } from './inbound-share.js';
import { gossipTally, type GossipTally, GossipValidator, scoreTopic } from './gossip.js';
import { BOOTSTRAP_TAG, BOOTSTRAP_TAG_VALUE, createHost, type DmsLibp2p, type HostOptions } from './host.js';
import { SharedPings } from './pings.js';
import { GreetedPeers } from './score.js';
import { libp2pLog, type NetworkLog, withoutStacks } from './network-log.js';

/** The unicast stream protocol (README "Network"). */
export const ACTOR_PROTOCOL = '/dms/actor/1.0.0';
export const DEFAULT_MAX_ENVELOPE_BYTES = 1024 * 1024;
const DEFAULT_MAX_QUEUED_BYTES = 16 * 1024 * 1024;
const DEFAULT_MAX_TOTAL_QUEUED_BYTES = 64 * 1024 * 1024;
const CONNECTION_WARN_EVERY_MS = 10_000;
const DEFAULT_DIAL_TIMEOUT_MS = 5_000;
const DEFAULT_LOOKUP_TIMEOUT_MS = 5_000;

export interface TransportOptions {
  /** Largest envelope JSON sent or accepted, in bytes (default 1 MiB). */
  maxEnvelopeBytes?: number;
  /** Bytes that may wait for one peer before sends to it fail as overloaded (default 16 MiB). */
  maxQueuedBytes?: number;
  /** Bytes that may wait over every peer before a peer with more than a batch waiting is refused (default 64 MiB: QueuedBytes). */
  maxTotalQueuedBytes?: number;
  /** How long a peer may take nothing sent to it before its stream is given up (channel.ts DEFAULT_STALL_MS). */
  sendStallMs?: number;
  /** Bound on dialling a peer and opening a stream, in ms (default 5 s). */
  dialTimeoutMs?: number;
  /** Bound on a DHT lookup for a peer with no usable address, in ms (default 5 s). */
  lookupTimeoutMs?: number;
  /** Defaults to libp2p's debug logger under `dms:transport`. */
  log?: NetworkLog;
  /** When a peer sending undecodable frames is warned about and banned (bans.ts); defaults there. */
  banPolicy?: Partial<BanPolicy>;
}

/** What the transport shares with its host: who gossipsub scores up, who the host refuses. */
interface HostParts {
  greeted: GreetedPeers;
  bans: PeerBans;
  partials?: PartialFrames;
  gossipTally?: GossipTally;
}

const isPromiseLike = (x: unknown): x is PromiseLike<unknown> => typeof (x as PromiseLike<unknown> | undefined)?.then === 'function';

/** What it returns is awaited only when a promise: the envelope is still being admitted (transport.ts). */
export type EnvelopeHandler = (env: Envelope, arrival: Arrival) => unknown;

export interface PeerEvent {
  peer: string;
  connected: boolean;
}
export type PeerHandler = (event: PeerEvent) => void;

export interface ConnectOptions {
  /**
   * Tag the peer keep-alive first (the address must end in /p2p/<id>): libp2p then keeps its
   * connection from being pruned and redials it when it is lost, as it does a bootstrap peer.
   */
  keepAlive?: boolean;
}

export interface TransportStats {
  /** Outbound streams opened on the actor protocol; stays at one per peer while streams live. */
  streamsOpened: number;
  envelopesSent: number;
  envelopesReceived: number;
  /** Inbound envelopes or frames thrown away: undecodable, oversized, or on the wrong topic. */
  dropped: number;
  /** What became of the gossip messages that reached this node (./gossip.ts). */
  gossip: GossipTally;
}

/**
 * The network side of the actor system over libp2p: unicast envelopes on one reused stream
 * per peer, broadcasts over gossipsub. It parses what arrives but leaves signature, expiry
 * and replay checks to the kernel, which applies them to every source alike; gossip is also
 * validated before gossipsub relays it (GossipValidator), so a forgery stops at the first hop.
 */
export class Libp2pTransport implements Transport {
  readonly host: string;
  private readonly maxEnvelopeBytes: number;
  /** What inbound actor streams hold of frames not yet whole, over every peer. */
  private readonly partials: PartialFrames;
  private readonly dialTimeoutMs: number;
  private readonly lookupTimeoutMs: number;
  private readonly log: NetworkLog;
  private readonly channels: OutboundChannels;
  private readonly envelopeHandlers = new Set<EnvelopeHandler>();
  private readonly peerHandlers = new Set<PeerHandler>();
  private readonly redialHandlers = new Set<(peer: string) => void>();
  private readonly counters: Omit<TransportStats, 'gossip'> = { streamsOpened: 0, envelopesSent: 0, envelopesReceived: 0, dropped: 0 };
  private readonly gossip: GossipValidator;
  private readonly greeted: GreetedPeers;
  private readonly bans: PeerBans;
  private stopped = false;
  /** Lines about connections closed on an error. */
  private readonly connectionWarnings = new LogGate(CONNECTION_WARN_EVERY_MS);
  /** Lines about streams reset for the partial-frame budget: a flood of them is one attack. */
  private readonly budgetWarnings = new LogGate(CONNECTION_WARN_EVERY_MS);
  /** Frames read from the actor streams, handed on in turns per host and peer. */
  private readonly intake = new FairIntake({ deliver: (frame, peer, at, host) => this.deliver(frame, peer, 'unicast', undefined, at, host) });
  private readonly pings = new SharedPings((peer, signal) => this.node.services.ping.ping(peerIdFromString(peer), { signal }));

  /** Builds the host, wires the transport into it, then starts it. */
  static async create(opts: HostOptions & TransportOptions): Promise<Libp2pTransport> {
    const maxEnvelopeBytes = opts.maxEnvelopeBytes ?? DEFAULT_MAX_ENVELOPE_BYTES;
    const parts: HostParts = { greeted: new GreetedPeers(), bans: new PeerBans({ ...DEFAULT_BAN_POLICY, ...opts.banPolicy }), partials: new PartialFrames(partialBudget(maxEnvelopeBytes)), gossipTally: gossipTally() };
    // The host's services register their protocols when it starts, after the transport exists.
    let transport: Libp2pTransport | undefined;
    const serviceStreamGivenUp: ServiceStreamGivenUp = (peer, protocol, why) => transport?.partialGivenUp(peer, why, givenUpText(protocol, why));
    const node = await createHost({ ...opts, ...parts, maxEnvelopeBytes, serviceStreamGivenUp });
    transport = await Libp2pTransport.attach(node, opts, parts);
    try {
      await node.start();
    } catch (e) {
      // Release whatever did start (a listener, a service) before reporting.
      await Promise.resolve(node.stop()).catch(() => undefined);
      throw new DmsError('unavailable', `libp2p did not start: ${withoutStacks(errorText(e))}`, { cause: e });
    }
    return transport;
  }

  /**
   * Wires a transport into a host from `createHost`; call before `node.start()`. Without the
   * parts the host was made with, greeted peers are not scored up and banned peers not refused.
   */
  static async attach(node: DmsLibp2p, opts: TransportOptions = {}, parts?: HostParts): Promise<Libp2pTransport> {
    const transport = new Libp2pTransport(node, opts, parts ?? { greeted: new GreetedPeers(), bans: new PeerBans({ ...DEFAULT_BAN_POLICY, ...opts.banPolicy }) });
    await node.handle(ACTOR_PROTOCOL, (stream, connection) => transport.acceptStream(stream, connection));
    return transport;
  }

  private constructor(
    readonly node: DmsLibp2p,
    opts: TransportOptions,
    parts: HostParts,
  ) {
    this.host = node.peerId.toString();
    this.greeted = parts.greeted;
    this.bans = parts.bans;
    this.maxEnvelopeBytes = opts.maxEnvelopeBytes ?? DEFAULT_MAX_ENVELOPE_BYTES;
    this.partials = parts.partials ?? new PartialFrames(partialBudget(this.maxEnvelopeBytes));
    this.channels = new OutboundChannels(
      {
        maxQueuedBytes: opts.maxQueuedBytes ?? DEFAULT_MAX_QUEUED_BYTES,
        maxTotalQueuedBytes: opts.maxTotalQueuedBytes ?? DEFAULT_MAX_TOTAL_QUEUED_BYTES,
        stallMs: opts.sendStallMs,
      },
      // Parsing a peer id costs tens of µs (it rebuilds the public key): only a new channel,
      // not a send on a live one, which already stands for a checked, routable host.
      (host) => {
        const peerId = this.routablePeer(host);
        return () => this.openStream(peerId);
      },
    );
    this.dialTimeoutMs = opts.dialTimeoutMs ?? DEFAULT_DIAL_TIMEOUT_MS;
    this.lookupTimeoutMs = opts.lookupTimeoutMs ?? DEFAULT_LOOKUP_TIMEOUT_MS;
    this.log = opts.log ?? libp2pLog(node);
    // A rejection is logged at debug only: a peer flooding forgeries must not flood the log as well.
    const rejected = (peer: string, topic: string, why: string) => (this.counters.dropped++, this.log.debug({ peer, topic, why }, 'gossip message rejected before relay'));
    this.gossip = new GossipValidator(this.maxEnvelopeBytes, rejected, this.host, undefined, parts.gossipTally);
    node.addEventListener('peer:connect', this.onConnect);
    node.addEventListener('connection:open', this.onConnectionOpen);
    node.addEventListener('peer:disconnect', this.onDisconnect);
    node.addEventListener('peer:reconnect-failure', this.onRedialGiveUp);
    node.services.pubsub.addEventListener('gossipsub:message', this.onGossip);
  }

  addrs(): string[] {
    const suffix = `/p2p/${this.host}`;
    return this.node.getMultiaddrs().map((ma) => {
      const text = ma.toString();
      return text.endsWith(suffix) ? text : text + suffix;
    });
  }

  peers(): string[] {
    // The connections' own ids, not libp2p's getPeers(): that one collects them in a PeerSet,
    // which keeps base58 strings and decodes each into a new PeerId on the way out, only for
    // this to encode it again. A job asks for the peers about three times on its way.
    const peers = new Set<string>();
    for (const conn of this.node.getConnections()) peers.add(conn.remotePeer.toString());
    return [...peers];
  }

  /** Peers known to be subscribed to `topic`, i.e. who a publish on it reaches directly. */
  topicPeers(topic: string): string[] {
    return this.node.services.pubsub.getSubscribers(topic).map(String);
  }

  stats(): TransportStats {
    return { ...this.counters, gossip: { ...this.gossip.tally } };
  }

  async send(env: Envelope): Promise<void> {
    const start = stageStart();
    this.assertRunning();
    const host = env.to.addr.host;
    const json = encodeEnvelope(env);
    const size = this.checkSize(json);
    const channel = this.channels.to(host);
    await channel.write(encodeFrame(json, size));
    this.counters.envelopesSent++;
    if (start !== undefined) {
      stageEnd(this.host, 'net.send', start);
      stageMark(this.host, 'request_sent', env, performance.now());
    }
  }

  /**
   * Publishes on `env.opt.topic`. The node's own subscribers do not get it back here
   * (gossipsub runs with emitSelf off): the kernel delivers broadcasts locally itself.
   */
  async publish(env: Envelope): Promise<void> {
    this.assertRunning();
    const topic = env.opt.topic;
    if (!topic) throw invalid('a broadcast envelope needs opt.topic');
    const json = encodeEnvelope(env);
    this.checkSize(json);
    const start = stageStart();
    // Before publishing: a reply can be read before publish() resolves.
    stageMark(this.host, 'broadcast_sent', env, start);
    try {
      await this.node.services.pubsub.publish(topic, Buffer.from(json, 'utf8'));
    } catch (e) {
      throw new DmsError('unroutable', `publishing on topic '${topic}' failed: ${errorText(e)}`, { cause: e });
    }
    this.counters.envelopesSent++;
    stageEnd(this.host, 'net.publish', start);
  }

  /** Subscribes with the gossip validator and peer scoring in place before the first message. */
  subscribe(topic: string): void {
    const pubsub = this.node.services.pubsub;
    pubsub.topicValidators.set(topic, this.gossip.validate);
    if (!scoreTopic(pubsub, topic)) this.log.warn({ topic }, 'gossipsub keeps no per-topic score weights here: forgers are not scored down');
    pubsub.subscribe(topic);
  }

  unsubscribe(topic: string): void {
    const pubsub = this.node.services.pubsub;
    pubsub.unsubscribe(topic);
    pubsub.topicValidators.delete(topic);
  }

  async ping(peer: string, timeoutMs = this.dialTimeoutMs): Promise<number> {
    this.assertRunning();
    const peerId = parsePeerId(peer);
    if (!peerId) throw invalid(`'${peer}' is not a libp2p peer id`);
    try {
      return await this.pings.of(peerId.toString(), timeoutMs);
    } catch (e) {
      throw new DmsError('unroutable', `ping to peer ${peer} failed: ${errorText(e)}`, { cause: e });
    }
  }

  async connect(address: string, opts: ConnectOptions = {}): Promise<string> {
    this.assertRunning();
    let ma: Multiaddr;
    try {
      ma = multiaddr(address);
    } catch (e) {
      throw invalid(`'${address}' is not a multiaddr: ${errorText(e)}`);
    }
    if (opts.keepAlive) {
      const peerId = parsePeerId(ma.getComponents().findLast((c) => c.name === 'p2p')?.value ?? '');
      if (!peerId) throw invalid(`'${address}' does not end in /p2p/<peer id>: only a known peer can be kept alive`);
      await this.node.peerStore.merge(peerId, { multiaddrs: [ma], tags: { [BOOTSTRAP_TAG]: { value: BOOTSTRAP_TAG_VALUE } } });
    }
    try {
      const connection = await this.node.dial(ma, { signal: AbortSignal.timeout(this.dialTimeoutMs) });
      return connection.remotePeer.toString();
    } catch (e) {
      throw new DmsError('unroutable', `cannot connect to ${address}: ${errorText(e)}`, { cause: e });
    }
  }

  /**
   * Tells the transport that `peer` completed the hello exchange (its root answered with its
   * own key): gossipsub scores it up while it stays connected (score.ts), so a crowd of
   * identities on its IP does not cut it off.
   */
  markGreeted(peer: string): void {
    if (this.node.getConnections().some((c) => c.remotePeer.toString() === peer)) this.greeted.add(peer);
  }

  /** Adds a handler for every envelope from the network; returns its removal. */
  onEnvelope(handler: EnvelopeHandler): () => void {
    this.envelopeHandlers.add(handler);
    return () => this.envelopeHandlers.delete(handler);
  }

  /** Adds a handler told when a peer gets its first connection or loses its last; returns its removal. */
  onPeer(handler: PeerHandler): () => void {
    this.peerHandlers.add(handler);
    return () => this.peerHandlers.delete(handler);
  }

  /**
   * Adds a handler told when libp2p gave up redialling a lost keep-alive peer (and dropped its
   * tag): from then on nobody redials it unless the handler does. Returns its removal.
   */
  onReconnectFailure(handler: (peer: string) => void): () => void {
    this.redialHandlers.add(handler);
    return () => this.redialHandlers.delete(handler);
  }

  async stop(): Promise<void> {
    if (this.stopped) return;
    this.stopped = true;
    this.node.removeEventListener('peer:connect', this.onConnect);
    this.node.removeEventListener('connection:open', this.onConnectionOpen);
    this.node.removeEventListener('peer:disconnect', this.onDisconnect);
    this.node.removeEventListener('peer:reconnect-failure', this.onRedialGiveUp);
    this.node.services.pubsub.removeEventListener('gossipsub:message', this.onGossip);
    this.intake.stop();
    const reason = new DmsError('unavailable', 'the network transport stopped');
    await this.channels.closeAll(reason);
    await this.node.stop();
  }

  // -------------------------------------------------------------------------------------------
  // Outbound

  private assertRunning(): void {
    if (this.stopped) throw new DmsError('unavailable', 'the network transport is stopped');
  }

  /** The envelope's UTF-8 size, if within the limit. */
  private checkSize(json: string): number {
    const size = utf8Length(json);
    if (size > this.maxEnvelopeBytes) {
      throw new DmsError('too_large', `envelope is ${size} bytes, over the ${this.maxEnvelopeBytes}-byte network limit`);
    }
    return size;
  }

  private routablePeer(host: string): PeerId {
    if (!host || host === this.host) {
      throw new DmsError('unroutable', `to.addr.host '${host}' is this node: local envelopes are not sent over the network`);
    }
    const peerId = parsePeerId(host);
    if (!peerId) throw new DmsError('unroutable', `to.addr.host '${host}' is not a libp2p peer id`);
    return peerId;
  }

  /**
   * A connection if there is one, else the peer store's addresses, else a DHT lookup. Stale
   * addresses (a peer that restarted elsewhere) also fall through to the lookup.
   */
  private async openStream(peerId: PeerId): Promise<Stream> {
    const peer = peerId.toString();
    let dialFailure = 'no connection and no known address';
    if (this.node.getConnections(peerId).length > 0 || (await this.hasAddresses(peerId))) {
      try {
        return this.opened(peer, await this.dialActor(peerId));
      } catch (e) {
        if (e instanceof Error && e.name === 'UnsupportedProtocolError') {
          throw new DmsError('unroutable', `peer ${peer} does not speak ${ACTOR_PROTOCOL}`, { cause: e });
        }
        dialFailure = `dial failed (${errorText(e)})`;
      }
    }
    // With no peer to ask, kad-dht would park the query until one connects: fail now instead.
    if (this.node.getConnections().length === 0) {
      throw new DmsError('unroutable', `cannot reach peer ${peer}: ${dialFailure}, and no connected peer to look it up through`);
    }
    try {
      // useCache: false, else the DHT answers with the very peer-store entry that just failed.
      await this.node.peerRouting.findPeer(peerId, { useCache: false, signal: AbortSignal.timeout(this.lookupTimeoutMs) });
    } catch (e) {
      throw new DmsError('unroutable', `cannot reach peer ${peer}: ${dialFailure}; DHT lookup found nothing (${errorText(e)})`, {
        cause: e,
      });
    }
    try {
      return this.opened(peer, await this.dialActor(peerId));
    } catch (e) {
      throw new DmsError('unroutable', `cannot reach peer ${peer} at the addresses the DHT gave: ${errorText(e)}`, { cause: e });
    }
  }

  private dialActor(peerId: PeerId): Promise<Stream> {
    return this.node.dialProtocol(peerId, ACTOR_PROTOCOL, { signal: AbortSignal.timeout(this.dialTimeoutMs) });
  }

  private opened(peer: string, stream: Stream): Stream {
    this.counters.streamsOpened++;
    this.log.debug({ peer, stream: stream.id }, 'actor stream opened');
    return stream;
  }

  private async hasAddresses(peerId: PeerId): Promise<boolean> {
    try {
      return (await this.node.peerStore.get(peerId)).addresses.length > 0;
    } catch {
      return false;
    }
  }

  // -------------------------------------------------------------------------------------------
  // Inbound

  private acceptStream(stream: Stream, connection: Connection): void {
    const peer = connection.remotePeer.toString();
    const host = hostOf(connection.remoteAddr) ?? peer;
    readActorStream(stream, peer, {
      maxFrameBytes: this.maxEnvelopeBytes,
      partials: this.partials,
      banned: () => this.bans.isBanned(peer),
      frame: (bytes, at) => this.intake.push(peer, host, stream, bytes, at),
      gaveUp: (why, text) => this.partialGivenUp(peer, why, text),
    });
  }

  /** A stream of `peer` was reset for what it held of a frame or message not yet whole, or for its rate (DHT, ping). */
  private partialGivenUp(peer: string, why: PartialEnd | 'unreadable' | RateEnd, text: string): void {
    this.counters.dropped++;
    if (why === 'rate') return this.misbehaved(peer, {}, `${text}; resetting the stream`, 'rate');
    // Past the budget an honest peer may be the one holding most, and past its host's rate another identity of the host may be: neither is held against it.
    if (why !== 'budget' && why !== 'host-rate') return this.misbehaved(peer, {}, `${text}; resetting the stream`);
    const unlogged = this.budgetWarnings.pass();
    if (unlogged !== undefined) this.log.warn({ peer, held: this.partials.held, budget: this.partials.budget, ...(unlogged ? { unlogged } : {}) }, text);
  }

  private readonly onGossip = (evt: CustomEvent<GossipsubMessage>): void => {
    const { msg, propagationSource } = evt.detail;
    // A signed message names its publisher, whose node the envelope came from; the
    // propagation source is merely the neighbour that relayed it.
    const peer = (msg.type === 'signed' ? msg.from : propagationSource).toString();
    if (msg.data.byteLength > this.maxEnvelopeBytes) {
      this.counters.dropped++;
      this.log.warn({ peer, topic: msg.topic, size: msg.data.byteLength }, 'gossip message over the envelope limit dropped');
      return;
    }
    this.deliver(this.gossip.envelopeOf(msg) ?? msg.data, peer, 'gossip', msg.topic, stageStart());
  };

  /**
   * Delivers an envelope, or the bytes of one, to the handlers; `at` is when it was read, if
   * timed. Returns what a handler is still admitting, for the intake's bound per peer.
   */
  private deliver(data: Uint8Array | Envelope, peer: string, via: Arrival['via'], topic?: string, at?: number, host?: string): PromiseLike<unknown> | void {
    let env: Envelope;
    if (data instanceof Uint8Array) {
      try {
        env = parseEnvelope(frameText(data));
      } catch (e) {
        this.counters.dropped++;
        // Only a unicast sender is the peer that wrote the bytes; gossip reaches here only on a
        // topic without the validator, which would have scored its sender down instead.
        if (via === 'unicast') this.misbehaved(peer, { via, err: errorText(e) }, 'undecodable envelope dropped');
        else this.log.debug({ peer, via, err: errorText(e) }, 'undecodable envelope dropped');
        return;
      }
      stageEnd(this.host, 'net.parse', at);
    } else {
      env = data;
    }
    // The signature covers opt.topic: an envelope replayed onto another topic would reach
    // subscribers it was never addressed to.
    if (topic !== undefined && env.opt.topic !== topic) {
      this.counters.dropped++;
      this.log.warn({ peer, topic, envTopic: env.opt.topic }, 'gossip envelope whose opt.topic is not its topic dropped');
      return;
    }
    this.counters.envelopesReceived++;
    stageMark(this.host, 'frame_read', env, at);
    // An envelope handed over parsed is one the gossip validator verified, signature included.
    const arrival: Arrival = data instanceof Uint8Array ? { peer, via, host } : { peer, via, signatureVerified: true };
    let admitting: PromiseLike<unknown> | void = undefined;
    for (const handler of this.envelopeHandlers) {
      try {
        const handled = handler(env, arrival);
        if (isPromiseLike(handled)) admitting = handled;
      } catch (e) {
        this.log.warn({ peer, via, err: errorText(e) }, 'envelope handler threw');
      }
    }
    return admitting;
  }

  /**
   * One more undecodable frame from `peer`, or stream reset past its own rate (worth
   * RATE_RESET_STRIKES frames): warned about at most once a minute (with how many went unlogged),
   * and past the policy's bound the peer is banned and disconnected. Without this a peer writing
   * garbage in a loop grew the log by megabytes a second.
   */
  private misbehaved(peer: string, fields: Record<string, unknown>, msg: string, cause: 'frame' | 'rate' = 'frame'): void {
    const strike = this.bans.strike(peer, Date.now(), cause === 'rate' ? RATE_RESET_STRIKES : 1);
    if (strike.action === 'warn') {
      this.log.warn({ peer, ...fields, strikes: strike.strikes, ...(strike.suppressed ? { unlogged: strike.suppressed } : {}) }, msg);
    } else if (strike.action === 'ban') {
      const { banMs } = this.bans.policy;
      this.log.warn(
        { peer, strikes: strike.strikes, until: new Date(strike.until).toISOString() },
        cause === 'rate'
          ? `peer went past its own rate on stream after stream (${strike.strikes} strikes, ${RATE_RESET_STRIKES} a stream, an undecodable frame 1): disconnected and refused for ${Math.round(banMs / 1000)} s`
          : `peer sent ${strike.strikes} undecodable frames: disconnected and refused for ${Math.round(banMs / 1000)} s`,
      );
      this.intake.drop(peer);
      // Cut off, not closed: a graceful close waits for the peer's streams to end, and a peer
      // still writing into them kept its connection, and the node's side of them, for as long as
      // it wrote (test/network/ping-rate.test.ts, 15 s on a slow hour).
      const peerId = parsePeerId(peer);
      if (peerId) for (const connection of this.node.getConnections(peerId)) connection.abort(new DmsError('forbidden', `peer ${peer} is banned`));
    }
  }

  // -------------------------------------------------------------------------------------------
  // Peers

  private readonly onConnect = (evt: CustomEvent<PeerId>): void => {
    this.emitPeer({ peer: evt.detail.toString(), connected: true });
  };

  /**
   * A connection that ends on an error says why: libp2p itself logs it only under DEBUG, so a
   * connection its ping monitor gave up on, or one the other side reset, vanished without a word.
   * At most one line per CONNECTION_WARN_EVERY_MS, with how many went unlogged: peers that
   * connect and reset in a loop must not grow the log.
   */
  private readonly onConnectionOpen = (evt: CustomEvent<Connection>): void => {
    const connection = evt.detail;
    connection.addEventListener(
      'close',
      (e) => {
        const error = (e as StreamCloseEvent).error;
        if (!error || this.stopped) return;
        const unlogged = this.connectionWarnings.pass();
        if (unlogged === undefined) return;
        const fields = { peer: connection.remotePeer.toString(), addr: connection.remoteAddr.toString(), err: errorText(error), ...(unlogged ? { unlogged } : {}) };
        this.log.warn(fields, 'connection closed on an error');
      },
      { once: true },
    );
  };

  private readonly onDisconnect = (evt: CustomEvent<PeerId>): void => {
    const peer = evt.detail.toString();
    this.greeted.delete(peer);
    this.channels.drop(peer, new DmsError('unroutable', `peer ${peer} disconnected`));
    this.emitPeer({ peer, connected: false });
  };

  private readonly onRedialGiveUp = (evt: CustomEvent<PeerId>): void => {
    const peer = evt.detail.toString();
    for (const handler of this.redialHandlers) {
      try {
        handler(peer);
      } catch (e) {
        this.log.warn({ peer, err: errorText(e) }, 'reconnect-failure handler threw');
      }
    }
  };

  private emitPeer(event: PeerEvent): void {
    for (const handler of this.peerHandlers) {
      try {
        handler(event);
      } catch (e) {
        this.log.warn({ peer: event.peer, err: errorText(e) }, 'peer handler threw');
      }
    }
  }
}

function parsePeerId(text: string): PeerId | undefined {
  try {
    return peerIdFromString(text);
  } catch {
    return undefined;
  }
}
