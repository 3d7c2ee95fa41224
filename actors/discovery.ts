import { fromPromise, type Actor as MachineActor } from 'xstate';
import { multiaddr } from '@multiformats/multiaddr';
import {
  ConnectPayload,
  type ConnectReply,
  DescribeChangedPayload,
  DescribePayload,
  DISCOVERY_INBOX,
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
  SelfChangedPayload,
} from '../behaviors/discovery.js';
import { HelloReply, NodeBehaviors } from '../behaviors/root.js';
import type { Actor } from '../runtime/actor.js';
import { type Behavior, defineBehavior } from '../runtime/behavior.js';
import { type ActorBody, type ActorContext, defineActor } from '../runtime/component.js';
import { peerIdFromPublicKey, publicKeyFromId } from '../runtime/crypto/keys.js';
import { DmsError, errorText, invalid } from '../runtime/errors.js';
import type { Libp2pTransport } from '../runtime/network/libp2p-transport.js';
import type { Handle } from '../runtime/wire/envelope.js';
import { type HelloOutcome, type PeerContext, type PeerLimits, peerMachine, peerState } from './peer-machine.js';
import { PeerProfiles } from './peer-profiles.js';
import { describeSelf, type ProfileSource } from './profile.js';
import { at } from '../runtime/wire/envelope.js';
import { msUntil } from '../runtime/time.js';

export { DISCOVERY_INBOX };

/** What discovery needs from the network; the libp2p transport fits as is, and tests can fake it. */
export type PeerNetwork = Pick<Libp2pTransport, 'addrs' | 'peers' | 'ping' | 'connect' | 'onPeer' | 'onReconnectFailure'> &
  Partial<Pick<Libp2pTransport, 'markGreeted'>>;

export interface DiscoveryDeps {
  /** Absent when the node runs without a network: lists are empty, ping and connect refuse. */
  network?: PeerNetwork;
  /** Multiaddrs ending in /p2p/<peer id> to stay connected to. */
  bootstrap?: readonly string[];
  /**
   * Actors that answer the discovery behaviors on their own inbox as well, while discovery
   * runs. The root actor is one: clients address a node by its root handle and have always
   * asked it for peers.
   */
  aliases?: readonly Actor[];
  /** What this node publishes at /public/describe besides its device facts (default: nothing more). */
  profile?: Omit<ProfileSource, 'addrs'>;
  /** Per-peer redial and hello bounds (peer-machine.ts); defaults below. */
  limits?: Partial<PeerLimits>;
  /**
   * Most peers followed besides the bootstrap peers (default 256). Anyone may connect, and
   * each followed peer holds a machine and a profile: past the cap the oldest peer that never
   * answered the hello is let go first, then the oldest that did.
   */
  maxPeers?: number;
  /** How long one hello or profile invoke waits for its reply (default 10 s). */
  helloTtlMs?: number;
  /** A peer profile younger than this is not asked for again when someone reads the list (default 5 s). */
  profileFreshMs?: number;
  /** Longest /dms/node/peers/describe waits for peers' answers (default 3 s). */
  profileWaitMs?: number;
}

/** One followed peer, as its machine has it. */
export interface PeerView {
  peer: string;
  /** The machine's state: 'dialing', 'backoff', 'connected.greeted', … */
  state: string;
  did: string | null;
  bootstrap: boolean;
  /** Dials failed since it was last connected, and the delay of the current backoff (ms). */
  failures: number;
  retryMs: number;
}

export interface DiscoveryApi {
  /** Peer id → DID of the connected peers that answered the hello exchange. */
  knownDids(): Record<string, string>;
  /** Every peer followed now, oldest first. */
  peers(): PeerView[];
}

const DEFAULT_LIMITS: PeerLimits = { redialMinMs: 1_000, redialMaxMs: 30_000, helloAttempts: 3, helloRetryMs: 1_000 };
const DEFAULT_MAX_PEERS = 256;
/** A ping waits as long as its caller does, less the reply's way back, within these bounds. */
const MIN_PING_MS = 1_000;
const MAX_PING_MS = 60_000;
const REPLY_MARGIN_MS = 250;

/**
 * The discovery actor (inbox `discovery`): answers what this node knows about its peers,
 * greets every peer that connects with a `/public/hello` invoke to learn its DID, and keeps
 * the node connected to its bootstrap peers. Each peer it follows is a `peer` machine
 * (peer-machine.ts), so every step of a peer shows as a transition on the system's events.
 */
export const Discovery = defineActor({
  inbox: DISCOVERY_INBOX,
  concurrency: 'node', // handlers wait on the network and share no half-changed state: each peer's is in its machine
  create: createDiscovery,
});

function createDiscovery({ actor, system, log, deps, machine }: ActorContext<DiscoveryDeps>): ActorBody<DiscoveryApi> {
  const network = deps.network;
  const limits: PeerLimits = { ...DEFAULT_LIMITS, ...deps.limits };
  const maxPeers = deps.maxPeers ?? DEFAULT_MAX_PEERS;
  const helloTtlMs = deps.helloTtlMs ?? 10_000;
  const bootstrap = network ? bootstrapPeers(deps.bootstrap ?? [], system.host) : new Map<string, string[]>();
  const source: ProfileSource = { version: '', executors: [], fallbackName: '', ...deps.profile, addrs: () => network?.addrs() ?? [] };
  const followed = new Map<string, MachineActor<typeof peerMachine>>();
  const rootOf = (peer: string): Handle => at('root', peer);

  const profiles = new PeerProfiles({
    ask: async (peer) => {
      // The answer counts only if the peer's own key signed it.
      const reply = await actor.invoke<unknown>(rootOf(peer), DiscoveryBehaviors.describe, {}, { ttlMs: helloTtlMs });
      if (peerOfDid(reply.env.from.did) !== peer) throw invalid(`the answer for ${peer} is signed by ${reply.env.from.did}, not by that peer`);
      return reply.payload;
    },
    connected: (peer) => network?.peers().includes(peer) ?? false,
    freshMs: deps.profileFreshMs ?? 5_000,
    waitMs: deps.profileWaitMs ?? 3_000,
    log: (fields, msg) => log.debug(fields, msg),
  });

  /** Dials a bootstrap peer at each of its addresses in turn, tagging it for libp2p to keep. */
  async function dial(addresses: readonly string[]): Promise<string> {
    if (!network) throw new DmsError('unavailable', 'the network is off');
    let failure: unknown;
    for (const address of addresses) {
      try {
        return await network.connect(address, { keepAlive: true });
      } catch (e) {
        failure = e;
      }
    }
    throw failure;
  }

  /** The hello exchange: ask the peer's root actor who it is; the answer counts if it is the peer's own key. */
  async function hello(peer: string): Promise<HelloOutcome> {
    let payload: unknown;
    try {
      payload = (await actor.invoke<unknown>(rootOf(peer), NodeBehaviors.hello, {}, { ttlMs: helloTtlMs })).payload;
    } catch (e) {
      // A peer that does not speak the actor protocol never will; anything else may be transient.
      if (e instanceof DmsError && e.kind === 'unroutable' && /does not speak/.test(e.message)) return { refused: e.message };
      throw e;
    }
    const parsed = HelloReply.safeParse(payload);
    if (!parsed.success) {
      log.warn({ peer }, 'hello reply is not {"did": ...}; DID not recorded');
      return { refused: 'the hello reply is not {"did": ...}' };
    }
    // The DID is the node key, and so is the peer id: a mismatch means the reply is not the peer's own.
    if (peerOfDid(parsed.data.did) !== peer) {
      log.warn({ peer, did: parsed.data.did }, 'peer answered hello with a DID that is not its own key; DID not recorded');
      return { refused: `the DID ${parsed.data.did} is not the peer's key` };
    }
    return { did: parsed.data.did };
  }

  const logic = peerMachine.provide({
    actors: {
      dial: fromPromise(({ input }) => dial(input.addresses)),
      hello: fromPromise(({ input }) => hello(input.peer)),
    },
    actions: {
      greeted: ({ context }) => {
        // A DMS node, not just a libp2p peer: gossip scores it up (runtime/network/score.ts).
        network?.markGreeted?.(context.peer);
        // Described as soon as it is known, so the first list already shows it.
        void profiles.refresh(context.peer);
      },
      helloFailed: ({ context }, { error, final }) =>
        log.debug({ peer: context.peer, attempt: context.helloAttempts, final, err: errorText(error) }, 'hello exchange failed'),
      dialFailed: ({ context: { peer, addresses, failures, retryMs } }, { error }) =>
        // Warn once per outage: an operator should learn the node is cut off, not every 30 s.
        log[failures === 1 ? 'warn' : 'debug'](
          { peer, addresses, failures, retryMs, err: errorText(error) },
          'bootstrap peer unreachable; will redial',
        ),
      lost: ({ context }) => profiles.forget(context.peer),
    },
  });

  function drop(peer: string, m: MachineActor<typeof peerMachine>): void {
    if (followed.get(peer) !== m) return;
    followed.delete(peer);
    profiles.forget(peer);
  }

  /** Lets go of the oldest ordinary peer that never answered the hello, else the oldest one. */
  function evictOne(): boolean {
    let victim: [string, MachineActor<typeof peerMachine>] | undefined;
    for (const entry of followed) {
      if (bootstrap.has(entry[0])) continue;
      victim ??= entry;
      if (!entry[1].getSnapshot().matches({ connected: 'greeted' })) {
        victim = entry;
        break;
      }
    }
    if (!victim) return false;
    log.debug({ peer: victim[0], maxPeers }, 'peer no longer followed: too many peers');
    victim[1].stop();
    drop(...victim);
    return true;
  }

  function follow(peer: string): MachineActor<typeof peerMachine> | undefined {
    const known = followed.get(peer);
    if (known) return known;
    if (!bootstrap.has(peer) && followed.size - bootstrap.size >= maxPeers && !evictOne()) return undefined;
    const m = machine(logic, { input: { peer, addresses: bootstrap.get(peer) ?? [], limits } });
    followed.set(peer, m);
    // A machine ends (state `gone`) when an ordinary peer disconnects.
    m.subscribe({ complete: () => drop(peer, m) });
    m.start();
    return m;
  }

  const didOf = (peer: string): string | null | undefined => followed.get(peer)?.getSnapshot().context.did;

  function knownDids(): Record<string, string> {
    const out: Record<string, string> = {};
    for (const peer of network?.peers() ?? []) {
      const did = didOf(peer);
      if (did) out[peer] = did;
    }
    return out;
  }

  function requireNetwork(): PeerNetwork {
    if (!network) throw new DmsError('unavailable', 'the network is off on this node (network.enabled is false)');
    return network;
  }

  const behaviors: Behavior<any, any>[] = [
    defineBehavior({
      name: DiscoveryBehaviors.peersList,
      payload: PeerListPayload,
      description: 'peers connected now, with the DID each gave in the hello exchange',
      handle: (): PeerListReply => ({ peers: network?.peers() ?? [], dids: knownDids() }),
    }),
    defineBehavior({
      name: DiscoveryBehaviors.peersDescribe,
      payload: PeersDescribePayload,
      description: 'peers connected now, each with the profile it published: name, addresses, resources, executors, last seen',
      handle: async ({ payload }): Promise<PeersDescribeReply> => {
        const peers = network?.peers() ?? [];
        const dids = knownDids();
        // Only peers that answered the hello exchange speak DMS; asking the others would only wait.
        await profiles.refreshStale(peers.filter((p) => dids[p]), payload.fresh ?? []);
        return { peers, dids, nodes: peers.map((id) => ({ id, did: dids[id] ?? null, ...profiles.get(id) })) };
      },
    }),
    defineBehavior({
      name: DiscoveryBehaviors.describe,
      payload: DescribePayload,
      description: "this node's published profile: name, location, addresses, onboarded and free resources, executors, version",
      // Asked through the actor running the handler (root, for the alias): its reply waiters
      // stay until its own mailbox drains. Discovery's are dropped when discovery stops, and a
      // handler on root waiting on one would hold root's stop for ever.
      handle: ({ actor: running }): Promise<NodeProfile> => describeSelf(running, source),
    }),
    defineBehavior({
      name: DiscoveryBehaviors.describeChanged,
      payload: DescribeChangedPayload,
      description: 'a peer says its profile changed: the copy kept of it is asked for again by the next reader',
      // The sender's own copy only: from a peer, from.addr.host is the peer it came from (the kernel checked).
      handle: ({ env }) => {
        if (env.from.addr.host !== system.host) profiles.outdated(env.from.addr.host);
      },
    }),
    defineBehavior({
      name: DiscoveryBehaviors.selfChanged,
      payload: SelfChangedPayload,
      description: "this node's settings changed: every greeted peer is told, so its next read of this node's profile asks again",
      handle: () => {
        for (const peer of Object.keys(knownDids())) {
          actor.tell(rootOf(peer), DiscoveryBehaviors.describeChanged, {}).catch((e: unknown) => log.debug({ peer, err: errorText(e) }, 'peer not told that this profile changed'));
        }
      },
    }),
    defineBehavior({
      name: DiscoveryBehaviors.peersSelf,
      payload: PeerSelfPayload,
      description: "this node's peer id, DID and listen addresses",
      handle: (): PeerSelfReply => ({ id: system.host, did: system.key.did, addrs: network?.addrs() ?? [] }),
    }),
    defineBehavior({
      name: DiscoveryBehaviors.peersPing,
      payload: PingPayload,
      description: 'round-trip time to a peer, dialling it if needed',
      handle: async ({ env, payload }): Promise<PingReply> => {
        if (payload.host === system.host) throw invalid(`host ${payload.host} is this node; ping another peer`);
        // As long as the caller waits (`dms peers ping --timeout`), less the way back, within bounds.
        const timeoutMs = Math.min(MAX_PING_MS, Math.max(MIN_PING_MS, msUntil(env.opt.exp) - REPLY_MARGIN_MS));
        return { rtt_ms: await requireNetwork().ping(payload.host, timeoutMs) };
      },
    }),
    defineBehavior({
      name: DiscoveryBehaviors.peersConnect,
      payload: ConnectPayload,
      description: 'dial a multiaddr and report the peer reached',
      handle: async ({ payload }): Promise<ConnectReply> => ({ peer: await requireNetwork().connect(payload.address) }),
    }),
  ];

  let unsubscribe: (() => void)[] = [];
  return {
    behaviors,
    api: {
      knownDids,
      peers: () =>
        [...followed].map(([peer, m]) => {
          const { value, context }: { value: unknown; context: PeerContext } = m.getSnapshot();
          return { peer, state: peerState(value), did: context.did, bootstrap: bootstrap.has(peer), failures: context.failures, retryMs: context.retryMs };
        }),
    },
    start() {
      // The same handlers on another inbox: their state lives here, not in the actor that runs them.
      for (const alias of deps.aliases ?? []) for (const b of behaviors) alias.add(b);
      if (!network) return;
      unsubscribe = [
        network.onPeer(({ peer, connected }) => {
          const known = followed.get(peer);
          if (connected) {
            if (known) known.send({ type: 'connected' });
            else follow(peer);
          } else {
            known?.send({ type: 'disconnected' });
          }
        }),
        network.onReconnectFailure((peer) => followed.get(peer)?.send({ type: 'redialFailed' })),
      ];
      for (const peer of bootstrap.keys()) follow(peer);
      // Peers that connected before this actor started (bootstrap dials run during start-up).
      for (const peer of network.peers()) follow(peer);
    },
    stop() {
      for (const off of unsubscribe.splice(0)) off();
      for (const m of followed.values()) m.stop();
      followed.clear();
      for (const alias of deps.aliases ?? []) for (const b of behaviors) if (alias.primary.behaviors.get(b.name) === b) alias.remove(b.name);
    },
  };
}

/** Bootstrap addresses by peer id; host.ts already refused addresses without /p2p/<id>. The node itself is left out. */
function bootstrapPeers(addresses: readonly string[], self: string): Map<string, string[]> {
  const out = new Map<string, string[]>();
  for (const address of addresses) {
    const peer = multiaddr(address).getComponents().findLast((c) => c.name === 'p2p')?.value;
    if (!peer || peer === self) continue;
    out.set(peer, [...(out.get(peer) ?? []), address]);
  }
  return out;
}

function peerOfDid(did: string): string | undefined {
  if (!did.startsWith('did:key:')) return undefined;
  try {
    return peerIdFromPublicKey(publicKeyFromId(did.slice('did:key:'.length)));
  } catch {
    return undefined;
  }
}
