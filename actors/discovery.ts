import { setTimeout as sleep } from 'node:timers/promises';
import { multiaddr } from '@multiformats/multiaddr';
import {
  ConnectPayload,
  type ConnectReply,
  DescribePayload,
  DiscoveryBehaviors,
  type NodeProfile,
  PeerListPayload,
  type PeerListReply,
  PeerSelfPayload,
  type PeerSelfReply,
  PeersDescribePayload,
  type PeersDescribeReply,
  PingPayload,
  type PingReply,
} from '../behaviors/discovery.js';
import { HelloReply, NodeBehaviors } from '../behaviors/node.js';
import { Actor } from '../runtime/actor.js';
import { type Behavior, defineBehavior } from '../runtime/behavior.js';
import { peerIdFromPublicKey, publicKeyFromId } from '../runtime/crypto/keys.js';
import { DmsError, errorText, invalid } from '../runtime/errors.js';
import type { Libp2pTransport } from '../runtime/network/transport.js';
import type { ActorSystem } from '../runtime/system.js';
import { PeerProfiles } from './peer-profiles.js';
import { describeSelf, type ProfileSource } from './profile.js';

export const DISCOVERY_INBOX = 'discovery';

/** What discovery needs from the network; the libp2p transport fits as is, and tests can fake it. */
export type PeerNetwork = Pick<Libp2pTransport, 'addrs' | 'peers' | 'ping' | 'connect' | 'onPeer'>;

export interface DiscoveryOptions {
  /** Absent when the node runs without a network: lists are empty, ping and connect refuse. */
  network?: PeerNetwork;
  /** Multiaddrs ending in /p2p/<peer id> to stay connected to. */
  bootstrap?: string[];
  /**
   * Actors that answer the discovery behaviors on their own inbox as well. The root actor is
   * one: clients address a node by its root handle and have always asked it for peers.
   */
  aliases?: Actor[];
  /** First redial delay after a bootstrap peer is lost or could not be reached (default 1 s). */
  redialMinMs?: number;
  /** Cap on the redial delay, which doubles with each failure (default 30 s). */
  redialMaxMs?: number;
  /** How long one hello invoke waits for its reply (default 10 s). */
  helloTtlMs?: number;
  /** What this node publishes at /public/describe besides its device facts (default: nothing more). */
  profile?: Omit<ProfileSource, 'addrs'>;
  /** A peer profile younger than this is not asked for again when someone reads the list (default 5 s). */
  profileFreshMs?: number;
  /** Longest /dms/node/peers/describe waits for peers' answers (default 3 s). */
  profileWaitMs?: number;
}

// A peer that stays silent after this many hellos is not a DMS node (or is wedged): stop asking.
const HELLO_ATTEMPTS = 3;
// Pause before the next hello, times the attempt: a failure that came fast (a stream reset
// while the peer starts up) should not use up every attempt at once.
const HELLO_RETRY_MS = 1_000;

/**
 * The discovery actor (inbox `discovery`): answers what this node knows about its peers,
 * greets every peer that connects with a `/public/hello` invoke to learn its DID, and keeps
 * the node connected to its bootstrap peers. libp2p's bootstrap dials each peer once, at
 * start: a node whose bootstrap peer was down then, or restarted since, would stay alone.
 */
export class DiscoveryActor extends Actor {
  private readonly network?: PeerNetwork;
  private readonly dids = new Map<string, string>();
  private readonly greeting = new Set<string>();
  private readonly keepers: BootstrapKeeper[];
  private readonly helloTtlMs: number;
  private readonly profile: ProfileSource;
  private readonly profiles: PeerProfiles;
  private unsubscribe = () => {};

  constructor(system: ActorSystem, opts: DiscoveryOptions = {}) {
    super(system, { inbox: DISCOVERY_INBOX });
    this.network = opts.network;
    this.helloTtlMs = opts.helloTtlMs ?? 10_000;
    this.profile = { version: '', executors: [], fallbackName: '', ...opts.profile, addrs: () => this.network?.addrs() ?? [] };
    this.profiles = new PeerProfiles({
      ask: async (peer) => this.askProfile(peer),
      connected: (peer) => this.network?.peers().includes(peer) ?? false,
      freshMs: opts.profileFreshMs ?? 5_000,
      waitMs: opts.profileWaitMs ?? 3_000,
      log: (fields, msg) => system.log.debug(fields, msg),
    });
    for (const b of this.behaviors()) {
      this.add(b);
      // The same handlers on another inbox: their state lives here, not in the actor that runs them.
      for (const alias of opts.aliases ?? []) alias.add(b);
    }
    const network = this.network;
    this.keepers = network
      ? (opts.bootstrap ?? []).map(
          (address) =>
            new BootstrapKeeper(address, network, {
              minMs: opts.redialMinMs ?? 1_000,
              maxMs: opts.redialMaxMs ?? 30_000,
              log: (level, fields, msg) => system.log[level](fields, msg),
            }),
        )
      : [];
  }

  override start(): void {
    super.start();
    if (!this.network) return;
    this.unsubscribe = this.network.onPeer(({ peer, connected }) => {
      if (connected) {
        void this.greet(peer);
      } else {
        // A peer's DID cannot change, but the map must not grow with every peer ever seen.
        this.dids.delete(peer);
        this.profiles.forget(peer);
      }
      for (const keeper of this.keepers) keeper.peerChanged(peer, connected);
    });
    // Peers that connected before this actor existed (bootstrap dials run during start-up).
    for (const peer of this.network.peers()) void this.greet(peer);
    for (const keeper of this.keepers) keeper.start();
  }

  override async stop(): Promise<void> {
    this.unsubscribe();
    for (const keeper of this.keepers) keeper.stop();
    await super.stop();
  }

  /** Peer id → DID of the connected peers that answered the hello exchange. */
  knownDids(): Record<string, string> {
    const connected = this.network?.peers() ?? [];
    const out: Record<string, string> = {};
    for (const peer of connected) {
      const did = this.dids.get(peer);
      if (did) out[peer] = did;
    }
    return out;
  }

  private behaviors(): Behavior<any, any>[] {
    const system = this.system;
    return [
      defineBehavior({
        name: DiscoveryBehaviors.peersList,
        payload: PeerListPayload,
        description: 'peers connected now, with the DID each gave in the hello exchange',
        handle: (): PeerListReply => ({ peers: this.network?.peers() ?? [], dids: this.knownDids() }),
      }),
      defineBehavior({
        name: DiscoveryBehaviors.peersDescribe,
        payload: PeersDescribePayload,
        description: 'peers connected now, each with the profile it published: name, addresses, resources, executors, last seen',
        handle: async (): Promise<PeersDescribeReply> => {
          const peers = this.network?.peers() ?? [];
          const dids = this.knownDids();
          // Only peers that answered the hello exchange speak DMS; asking the others would only wait.
          await this.profiles.refreshStale(peers.filter((p) => dids[p]));
          return { peers, dids, nodes: peers.map((id) => ({ id, did: dids[id] ?? null, ...this.profiles.get(id) })) };
        },
      }),
      defineBehavior({
        name: DiscoveryBehaviors.describe,
        payload: DescribePayload,
        description: "this node's published profile: name, location, addresses, onboarded and free resources, executors, version",
        handle: (): Promise<NodeProfile> => describeSelf(this, this.profile),
      }),
      defineBehavior({
        name: DiscoveryBehaviors.peersSelf,
        payload: PeerSelfPayload,
        description: "this node's peer id, DID and listen addresses",
        handle: (): PeerSelfReply => ({ id: system.host, did: system.key.did, addrs: this.network?.addrs() ?? [] }),
      }),
      defineBehavior({
        name: DiscoveryBehaviors.peersPing,
        payload: PingPayload,
        description: 'round-trip time to a peer, dialling it if needed',
        handle: async ({ payload }): Promise<PingReply> => {
          if (payload.host === system.host) throw invalid(`host ${payload.host} is this node; ping another peer`);
          return { rtt_ms: await this.requireNetwork().ping(payload.host) };
        },
      }),
      defineBehavior({
        name: DiscoveryBehaviors.peersConnect,
        payload: ConnectPayload,
        description: 'dial a multiaddr and report the peer reached',
        handle: async ({ payload }): Promise<ConnectReply> => ({ peer: await this.requireNetwork().connect(payload.address) }),
      }),
    ];
  }

  private requireNetwork(): PeerNetwork {
    if (!this.network) throw new DmsError('unavailable', 'the network is off on this node (network.enabled is false)');
    return this.network;
  }

  /** The hello exchange: ask the peer's root actor who it is, and keep the answer if it checks out. */
  private async greet(peer: string): Promise<void> {
    if (this.dids.has(peer) || this.greeting.has(peer)) return;
    this.greeting.add(peer);
    try {
      for (let attempt = 1; attempt <= HELLO_ATTEMPTS && this.state === 'running'; attempt++) {
        if (!this.network?.peers().includes(peer)) return;
        try {
          const reply = await this.invoke<unknown>(
            { id: '', did: '', addr: { host: peer, inbox: 'root' } },
            NodeBehaviors.hello,
            {},
            { ttlMs: this.helloTtlMs },
          );
          // Described as soon as it is known, so the first list already shows it.
          if (this.record(peer, reply.payload)) void this.profiles.refresh(peer);
          return;
        } catch (e) {
          this.system.log.debug({ peer, attempt, err: errorText(e) }, 'hello exchange failed');
          // A peer that does not speak the actor protocol never will; anything else may be transient.
          if (e instanceof DmsError && e.kind === 'unroutable' && /does not speak/.test(e.message)) return;
          if (attempt < HELLO_ATTEMPTS) await sleep(HELLO_RETRY_MS * attempt, undefined, { ref: false });
        }
      }
    } finally {
      this.greeting.delete(peer);
    }
  }

  private record(peer: string, payload: unknown): boolean {
    const hello = HelloReply.safeParse(payload);
    if (!hello.success) {
      this.system.log.warn({ peer }, 'hello reply is not {"did": ...}; DID not recorded');
      return false;
    }
    const did = hello.data.did;
    // The DID is the node key, and so is the peer id: a mismatch means the reply is not the peer's own.
    if (peerOfDid(did) !== peer) {
      this.system.log.warn({ peer, did }, 'peer answered hello with a DID that is not its own key; DID not recorded');
      return false;
    }
    if (!this.network?.peers().includes(peer)) return false;
    this.dids.set(peer, did);
    return true;
  }

  /** Asks a peer's root actor for its profile; the answer counts only if the peer's own key signed it. */
  private async askProfile(peer: string): Promise<unknown> {
    const reply = await this.invoke<unknown>({ id: '', did: '', addr: { host: peer, inbox: 'root' } }, DiscoveryBehaviors.describe, {}, { ttlMs: this.helloTtlMs });
    if (peerOfDid(reply.env.from.did) !== peer) throw invalid(`the answer for ${peer} is signed by ${reply.env.from.did}, not by that peer`);
    return reply.payload;
  }
}

export function spawnDiscoveryActor(system: ActorSystem, opts: DiscoveryOptions = {}): DiscoveryActor {
  const actor = system.register(new DiscoveryActor(system, opts));
  actor.start();
  return actor;
}

function peerOfDid(did: string): string | undefined {
  if (!did.startsWith('did:key:')) return undefined;
  try {
    return peerIdFromPublicKey(publicKeyFromId(did.slice('did:key:'.length)));
  } catch {
    return undefined;
  }
}

interface KeeperOptions {
  minMs: number;
  maxMs: number;
  log: (level: 'warn' | 'debug', fields: Record<string, unknown>, msg: string) => void;
}

/**
 * Keeps one bootstrap peer connected: whenever it is not, dials it again after a delay that
 * doubles with each failure up to a cap, so a peer that is down for long costs one dial per
 * cap interval, and a peer that restarts is back within about `minMs`.
 */
class BootstrapKeeper {
  readonly peer: string;
  private failures = 0;
  private timer?: NodeJS.Timeout;
  private dialing = false;
  private stopped = false;

  constructor(
    readonly address: string,
    private readonly network: PeerNetwork,
    private readonly opts: KeeperOptions,
  ) {
    // host.ts already refused bootstrap addresses without /p2p/<id> at start-up.
    this.peer = multiaddr(address).getComponents().findLast((c) => c.name === 'p2p')?.value ?? '';
  }

  /** libp2p dials bootstrap peers itself just after start; check after a delay whether that worked. */
  start(): void {
    this.schedule(this.opts.minMs);
  }

  stop(): void {
    this.stopped = true;
    clearTimeout(this.timer);
  }

  peerChanged(peer: string, connected: boolean): void {
    if (peer !== this.peer || this.stopped) return;
    if (connected) {
      this.failures = 0;
      clearTimeout(this.timer);
      this.timer = undefined;
    } else {
      this.opts.log('debug', { peer }, 'bootstrap peer lost; redialling');
      this.schedule(this.opts.minMs);
    }
  }

  private schedule(delayMs: number): void {
    if (this.stopped) return;
    clearTimeout(this.timer);
    // Jitter keeps the nodes that lost the same bootstrap peer from redialling it in lockstep.
    this.timer = setTimeout(() => void this.attempt(), delayMs * (0.75 + Math.random() * 0.5));
    this.timer.unref();
  }

  private async attempt(): Promise<void> {
    this.timer = undefined;
    if (this.stopped || this.dialing || this.network.peers().includes(this.peer)) return;
    this.dialing = true;
    try {
      await this.network.connect(this.address);
      this.failures = 0;
    } catch (e) {
      this.failures++;
      const delay = Math.min(this.opts.minMs * 2 ** this.failures, this.opts.maxMs);
      // Warn once per outage: an operator should learn the node is cut off, not every 30 s.
      const level = this.failures === 1 ? 'warn' : 'debug';
      this.opts.log(level, { peer: this.peer, address: this.address, failures: this.failures, retryMs: delay, err: errorText(e) }, 'bootstrap peer unreachable; will redial');
      this.schedule(delay);
    } finally {
      this.dialing = false;
    }
  }
}
