import { KeyPair } from '../../runtime/crypto/keys.js';
import { signEnvelopeSync } from './envelopes.js';
import { silentLogger } from '../../runtime/log.js';
import { Libp2pTransport } from '../../runtime/network/libp2p-transport.js';
import { msToNs, nextNonce, nowNs } from '../../runtime/time.js';
import { decodePayload, emptyHandle, encodePayload, type Envelope } from '../../runtime/wire/envelope.js';
import { type ClusterOptions, listenAddr, startCluster, stopCluster, waitFor } from './network.js';
import { type NodeProcess, removeHome, type TestNode } from './node.js';

/**
 * A foreign libp2p peer that is not a DMS node: it speaks the actor protocol and gossipsub
 * directly, so a test can hand a real node exactly the envelopes an attacker would, bypassing
 * every REST check, and see the replies that come back.
 */
export class ForeignPeer {
  readonly arrived: Envelope[] = [];
  /** The key it signs envelopes with (a throwaway identity, not its libp2p key). */
  readonly key = KeyPair.generate();

  /**
   * @param nodeKey its libp2p identity: what a node signs with as a node (a provider's result
   * manifest), so a test can sign as this peer would.
   */
  private constructor(readonly transport: Libp2pTransport, readonly nodeKey: KeyPair) {
    transport.onEnvelope((env) => this.arrived.push(env));
  }

  static async start(): Promise<ForeignPeer> {
    const nodeKey = KeyPair.generate();
    const transport = await Libp2pTransport.create({ keyPair: nodeKey, listen: ['/ip4/127.0.0.1/tcp/0'], log: silentLogger() });
    return new ForeignPeer(transport, nodeKey);
  }

  /** A foreign peer connected to `node`, as the node itself lists it; stopped again when it cannot connect. */
  static async connectedTo(node: TestNode): Promise<ForeignPeer> {
    const peer = await ForeignPeer.start();
    // A node takes at most 5 inbound connections a second from one IP (libp2p's flood guard),
    // and every peer of a test dials from 127.0.0.1: a refused dial is tried again once the
    // second is over. A test that expects a refusal dials with connect() itself.
    for (let attempt = 1; ; attempt++) {
      try {
        await peer.connect(node);
        break;
      } catch (e) {
        if (attempt >= 5) {
          await peer.stop();
          throw e;
        }
        await new Promise((r) => setTimeout(r, 1_100));
      }
    }
    try {
      await nodeLists(node, peer.host);
    } catch (e) {
      await peer.stop();
      throw e;
    }
    return peer;
  }

  get host(): string {
    return this.transport.host;
  }

  async connect(node: TestNode): Promise<void> {
    await this.transport.connect(listenAddr(node));
  }

  /**
   * A signed envelope from this peer (from.addr.host = its own peer id unless `host` says
   * otherwise), to `inbox` on `node`, or a broadcast on `topic` when `topic` is given; `cap`
   * is the capability token list it carries.
   */
  envelope(node: TestNode | undefined, b: { be: string; inbox?: string; cont?: string; exp?: bigint; ttlMs?: number; topic?: string; host?: string; fromInbox?: string; key?: KeyPair; payload?: unknown; cap?: Uint8Array }): Envelope {
    const key = b.key ?? this.key;
    const env: Envelope = {
      to: b.topic || !node ? emptyHandle() : { id: '', did: '', addr: { host: node.peerId, inbox: b.inbox ?? 'root' } },
      be: b.be,
      from: { id: key.id, did: key.did, addr: { host: b.host ?? this.host, inbox: b.fromInbox ?? 'foreign' } },
      nonce: nextNonce(),
      opt: { exp: b.exp ?? nowNs() + msToNs(b.ttlMs ?? 30_000) },
      msg: encodePayload(b.payload ?? {}),
    };
    if (b.cont) env.opt.cont = b.cont;
    if (b.topic) env.opt.topic = b.topic;
    if (b.cap) env.cap = b.cap;
    return signEnvelopeSync(env, key);
  }

  /**
   * A reply to `request` from this peer, signed by it as WIRE.md's invoke says: to the request's
   * sender, behavior its opt.cont, the request's exp; `inbox` names the answering actor.
   */
  replyTo(request: Envelope, payload: unknown, inbox = 'root'): Envelope {
    const env: Envelope = {
      to: request.from,
      be: request.opt.cont!,
      from: { id: this.key.id, did: this.key.did, addr: { host: this.host, inbox } },
      nonce: nextNonce(),
      opt: { exp: request.opt.exp },
      msg: encodePayload(payload),
    };
    return signEnvelopeSync(env, this.key);
  }

  /** Sends over the actor protocol (one stream per peer, reused). */
  send(env: Envelope): Promise<void> {
    return this.transport.send(env);
  }

  /** Publishes on gossipsub once some peer is known to be subscribed to the envelope's topic. */
  async publish(env: Envelope): Promise<void> {
    await waitFor(`a peer subscribed to ${env.opt.topic}`, () => this.transport.topicPeers(env.opt.topic!).length > 0);
    await this.transport.publish(env);
  }

  replies(be: string): Envelope[] {
    return this.arrived.filter((e) => e.be === be);
  }

  waitReply(be: string, timeoutMs = 20_000): Promise<Envelope> {
    return waitFor(`a reply at ${be}`, () => this.arrived.find((e) => e.be === be), { timeoutMs, intervalMs: 50 });
  }

  stop(): Promise<void> {
    return this.transport.stop();
  }
}

/**
 * Makes `peer` answer as a provider: it bids for every job it is offered (with exactly the
 * resources asked, the null executor, idle), and answers the other requests that expect a
 * reply with what `answers` gives for their behavior and payload (undefined: no answer).
 * Every envelope it receives is passed to `received` first.
 */
export function answerAsProvider(peer: ForeignPeer, received: (env: Envelope) => void, answers: (be: string, body: any, env: Envelope) => unknown): void {
  peer.transport.onEnvelope((env) => {
    received(env);
    if (!env.opt.cont) return;
    const body = decodePayload(env.msg) as any;
    const payload =
      env.be === '/dms/deployment/bid'
        ? { node: peer.host, answers: body.jobs.map((j: any) => ({ job_id: j.job_id, free: j.resources, load: 0, executors: ['null'] })) }
        : answers(env.be, body, env);
    if (payload === undefined) return;
    void peer.send(peer.envelope({ peerId: env.from.addr.host } as TestNode, { be: env.opt.cont, exp: env.opt.exp, inbox: env.from.addr.inbox, payload })).catch(() => undefined);
  });
}

/**
 * Makes `peer` a provider that keeps none of its word: it bids for every job it is offered,
 * grants a minute's lease, and refuses every start. `otherwise` answers any other request that
 * expects a reply (none, by default).
 */
export function refuseEveryStart(peer: ForeignPeer, received: (env: Envelope) => void, otherwise?: (env: Envelope, body: any) => unknown): void {
  answerAsProvider(peer, received, (be, body, env) => {
    if (be === '/dms/deployment/reserve') return { until: new Date(Date.now() + 60_000).toISOString() };
    if (be === '/dms/deployment/start') return { kind: 'unavailable', error: 'cannot start it after all' };
    return otherwise?.(env, body);
  });
}

/** One node and strangers beside it: foreign peers connected to it, `peer` the first of them. */
export interface StrangerAtNodeScene<N extends TestNode = NodeProcess> {
  node: N;
  peer: ForeignPeer;
  peers: ForeignPeer[];
  /** Stops the peers, then the node, and removes its home. */
  stop(): Promise<void>;
}

/**
 * The node `start` gives (a process or in this process, configured as the test needs) with
 * `peers` foreign peers connected to it, dialling at once. When it cannot be made, whatever it
 * started is stopped.
 */
export async function strangerBesideANode<N extends TestNode>(start: () => Promise<N>, peers = 1): Promise<StrangerAtNodeScene<N>> {
  const node = await start();
  const dialled = await Promise.allSettled(Array.from({ length: peers }, () => ForeignPeer.connectedTo(node)));
  const connected = dialled.flatMap((d) => (d.status === 'fulfilled' ? [d.value] : []));
  const stop = async () => {
    await Promise.all(connected.map((p) => p.stop()));
    await node.stop();
    removeHome(node.home);
  };
  const failed = dialled.find((d) => d.status === 'rejected');
  if (failed) {
    await stop();
    throw (failed as PromiseRejectedResult).reason;
  }
  return { node, peer: connected[0]!, peers: connected, stop };
}

/** Two nodes on loopback and a stranger beside them: a foreign peer connected to the first (`a`). */
export interface StrangerScene<N extends TestNode = NodeProcess> {
  a: N;
  b: N;
  peer: ForeignPeer;
  stop(): Promise<void>;
}

export async function strangerBesideTwoNodes<N extends TestNode = NodeProcess>(opts: ClusterOptions<N> = {}): Promise<StrangerScene<N>> {
  const nodes = await startCluster(2, opts);
  try {
    const peer = await ForeignPeer.connectedTo(nodes[0]);
    const stop = async () => {
      await peer.stop();
      await stopCluster(nodes);
    };
    return { a: nodes[0], b: nodes[1], peer, stop };
  } catch (e) {
    await stopCluster(nodes);
    throw e;
  }
}

/**
 * One sybil visit: a fresh libp2p identity (the project's own transport) connects to each of
 * `nodes`, subscribes to `topics`, stays until every node is a gossipsub peer of it on them
 * (so each node has it in its peer score, with its IP), then leaves.
 */
export async function sybilVisit(nodes: TestNode[], topics: string[], timeoutMs = 15_000): Promise<string> {
  const peer = await ForeignPeer.start();
  try {
    for (const topic of topics) peer.transport.subscribe(topic);
    for (const node of nodes) {
      // libp2p refuses more than a few inbound connections a second from one IP: try again.
      await waitFor(`sybil ${peer.host.slice(-6)} connected to ${node.peerId.slice(-6)}`, () => peer.connect(node).then(() => true), { timeoutMs, intervalMs: 250 });
    }
    // A node may drop the connection before its subscriptions arrive (seen twice in clean-clone
    // CI runs: 'NOT connected, seen on no topic'). The likely cause, libp2p aborting a connection
    // whose monitor ping found the one ping stream taken, is fixed (runtime/network/pings.ts,
    // guarded by test/network/transport.test.ts); a real peer dials again whatever the cause,
    // and so does the sybil, saying so, since what is tested is what the node holds against it.
    let redialAt = 0;
    const seesEveryNode = async (): Promise<boolean> => {
      if (topics.every((t) => nodes.every((n) => peer.transport.topicPeers(t).includes(n.peerId)))) return true;
      const lost = nodes.filter((n) => !peer.transport.peers().includes(n.peerId));
      if (lost.length > 0 && Date.now() >= redialAt) {
        redialAt = Date.now() + 1_000;
        for (const n of lost) {
          console.warn(`sybil ${peer.host.slice(-6)}: node ${n.peerId.slice(-6)} dropped its connection; dialling again`);
          await peer.connect(n).catch(() => undefined);
        }
      }
      return false;
    };
    await waitFor(`sybil ${peer.host.slice(-6)} to see every node on ${topics.join(', ')}`, seesEveryNode, {
      timeoutMs,
      intervalMs: 50,
      // Which node it lost or never heard from: a closed connection and an unanswered subscription differ.
      explain: () =>
        nodes
          .map((n) => `node ${n.peerId.slice(-6)}: ${peer.transport.peers().includes(n.peerId) ? 'connected' : 'NOT connected'}, seen on ${topics.filter((t) => peer.transport.topicPeers(t).includes(n.peerId)).join(', ') || 'no topic'}`)
          .join('; '),
    });
    return peer.host;
  } finally {
    await peer.stop();
  }
}

/**
 * Waits until `node` lists `peer` among its connections. A dial ends on the dialler's side
 * before the node has finished its half of the upgrade (the node's listing lagged the dial by
 * 16-30 ms in 26 of 30 tries): a test that asked the node to reach the peer at once was
 * answered "no connection and no known address" about one run in ten. Asked with a GET, not
 * DmsClient.peers(): that is an invoke, whose envelope takes a place in the node's replay table,
 * and test/security/replay.test.ts counts those places.
 */
async function nodeLists(node: TestNode, peer: string): Promise<void> {
  await waitFor(
    `node ${node.peerId} to list peer ${peer} as connected`,
    async () => ((await (await fetch(`${node.url}/api/v1/peers`, { signal: AbortSignal.timeout(2_000) })).json()) as { peers?: string[] }).peers?.includes(peer),
    { timeoutMs: 5_000, intervalMs: 5 },
  );
}
