import { rmSync } from 'node:fs';
import { hostname } from 'node:os';
import { NODE_VERSION, RootActor, ROOT_INBOX } from '../actors/root.js';
import { Discovery } from '../actors/discovery.js';
import { HttpActor } from '../http/actor.js';
import { createApp } from '../http/app.js';
import { listen, type Listening } from '../http/server.js';
import { allowsUnsigned, type Config } from '../runtime/config.js';
import { DmsError } from '../runtime/errors.js';
import { makeDirs, writeJsonAtomic } from '../runtime/files.js';
import { type ConfigOverride, homePaths, initHome, type RuntimeInfo } from '../runtime/home.js';
import type { Logger } from '../runtime/log.js';
import { ReplayLog } from '../runtime/replay-log.js';
import { makeActor } from '../runtime/component.js';
import { NodeMetrics } from '../runtime/metrics.js';
import type { KeyPair } from '../runtime/crypto/keys.js';
import { StageTimings } from '../runtime/stage-timings.js';
import { StartOrder } from '../runtime/start-order.js';
import { ActorSystem } from '../runtime/system.js';
import { listenFailures } from '../runtime/network/listen-failure.js';
import type { Libp2pTransport } from '../runtime/network/libp2p-transport.js';
import { REMOTE_EXECUTOR } from '../actors/executors/remote.js';
import { BUILTIN_INBOXES, loadPlugins, pluginActor, pluginExecutors, pluginRoutes } from './plugins.js';
import { deviceRoutes } from '../http/routes/device.js';
import { peerRoutes } from '../http/routes/peers.js';
import { jobRoutes } from '../http/routes/jobs.js';
import { ensembleRoutes } from '../http/routes/ensembles.js';
import { resourceRoutes } from '../http/routes/resources.js';
import { BUILTIN_EXECUTORS, startJobs } from './jobs.js';
import { setUpSecurity } from './security.js';
import { type NodeBlocks, startBlocks } from './blocks.js';
import { outputRoutes } from '../http/routes/outputs.js';
import { startTunnels } from './tunnels.js';
import { portRoutes } from '../http/routes/ports.js';
import { EnsembleNetActor } from '../actors/ensembles/network.js';
import { ENSEMBLE_NET_INBOX } from '../behaviors/ensembles/schema.js';

export interface NodeOptions {
  home: string;
  config: Config;
  log: Logger;
  /** Settings taken from start flags or the environment, recorded in the runtime file for `dms config get`. */
  overrides?: ConfigOverride[];
}

/**
 * One running DMS node: the composition root that wires the kernel, the component actors and
 * the HTTP actor together, in the order they depend on each other. Nothing else knows all of
 * them. A failed step stops what had started (runtime/start-order.ts); stop() undoes every
 * step in reverse.
 */
export class DmsNode {
  private constructor(
    readonly system: ActorSystem,
    readonly http: Listening,
    readonly config: Config,
    readonly home: string,
    /** Its block store, pins and retention (./blocks.ts). */
    readonly blocks: NodeBlocks,
    private readonly log: Logger,
    private readonly order: StartOrder,
  ) {}

  get url(): string {
    return this.http.url;
  }

  static async start(opts: NodeOptions): Promise<DmsNode> {
    const { config, log, home } = opts;
    const keys = initHome(home);
    const order = new StartOrder(log);
    const system = await order.step(
      'kernel',
      () =>
        new ActorSystem({
          key: keys.node,
          log,
          mailbox: { capacity: config.actor.mailbox_capacity, concurrency: config.actor.mailbox_concurrency },
          replay: ReplayLog.open(homePaths(home).replayLog, {
            capacity: config.actor.replay_capacity,
            perSender: config.actor.replay_per_sender,
            perPeer: config.actor.replay_per_peer,
            restQuota: config.actor.replay_rest_quota,
          }),
          maxTtlS: config.actor.max_ttl_s,
          metrics: new NodeMetrics(),
        }),
      // Last to stop: the actors still bound, the network it owns, the replay log.
      (s) => s.stop(),
    );
    // Subscribed before the first envelope, so every one is timed; none subscribed, the path times nothing.
    const stages = config.general.stage_timings
      ? await order.step('stage timings', () => new StageTimings(system.host).attach(), (s) => s.detach())
      : undefined;
    // Before the network can deliver anything: every envelope passes the capability checks.
    const security = await order.step('security', () => setUpSecurity({ system, config, home, operator: keys.operator, log }), (s) => s.close());
    // The network comes up before the actors so their topic subscriptions reach gossipsub; the
    // kernel owns it once attached and stops it last.
    const transport = config.network.enabled ? await order.step('network', () => startNetwork(system, config, log, keys.node)) : undefined;
    const root = await order.component(ROOT_INBOX, () => makeActor(system, RootActor, {}));
    // Imported and checked, names included, before any of their parts is made.
    const plugins = await order.step('plugins', () =>
      loadPlugins(config.plugins.modules, home, { inboxes: BUILTIN_INBOXES, executors: [...BUILTIN_EXECUTORS, REMOTE_EXECUTOR] }, config.plugins.config, config.plugins.load_timeout_s * 1000),
    );
    // Before the jobs: the docker executor asks it for a part's networks and names before it
    // creates the container, and the orchestrator restarts parts as soon as it starts; the
    // tunnels step after the jobs reads its grants. After the network, whose libp2p carries
    // the names of parts on other nodes. Stopped after the executors, so a last detach lands.
    const ensembleNet = await order.component(ENSEMBLE_NET_INBOX, () =>
      makeActor(system, EnsembleNetActor, {
        tunnels: transport && ensembleTunnels(transport),
        idleMs: config.tunnel.idle_timeout_ms,
        maxConnections: config.tunnel.max_streams_per_peer,
      }),
    );
    // Before the jobs, whose executors collect outputs into it; stopped after them.
    const blocks = await order.step('blocks', () => startBlocks(system, config, home, log, transport), (b) => b.stop());
    const jobs = await order.step(
      'jobs',
      () => startJobs({ system, config, home, log, authority: security.authority, pluginExecutors: plugins.flatMap(pluginExecutors), blocks }),
      (j) => j.stop(),
    );
    // After the jobs part, whose records say who may reach which job's ports; stopped before it.
    const tunnels = await order.step('tunnels', () => startTunnels({ host: system.host, system, config, storage: jobs.storage, log, transport, ensembles: ensembleNet.api.grants }), (t) => t.stop());
    // After the jobs part, so a start hook can call the orchestrator and its executors; stopped before them.
    const pluginActors = [];
    for (const loaded of plugins) {
      const made = await order.component(loaded.plugin.name, () => makeActor(system, pluginActor(loaded), {}));
      pluginActors.push({ loaded, ctx: made.api.ctx });
    }
    if (plugins.length) log.info({ plugins: plugins.map((p) => p.plugin.name) }, 'plugins loaded');
    // After the jobs component, whose executors the node's profile names. Peers that connected
    // meanwhile are greeted when it starts.
    await order.component('discovery', () =>
      makeActor(system, Discovery, {
        network: transport,
        bootstrap: config.network.BootstrapPeers,
        aliases: [root.actor],
        profile: { version: NODE_VERSION, executors: jobs.executors.names(), fallbackName: config.general.name || hostname() },
      }),
    );
    const httpActor = await order.component('http', () =>
      makeActor(system, HttpActor, {
        operator: keys.operator,
        allowUnsigned: allowsUnsigned(config),
        maxPending: config.rest.max_pending,
        maxBroadcastReplies: config.rest.max_broadcast_replies,
        maxBroadcastRepliesPerHost: config.rest.max_broadcast_replies_per_host,
        maxBroadcastBytes: config.rest.max_broadcast_bytes,
        maxPendingBytesPerClient: config.rest.max_pending_bytes_per_client,
        roles: config.rest.roles,
        openTopics: config.capabilities.open_topics,
        rootInbox: ROOT_INBOX,
        precheck: security.precheck,
        provide: security.provide,
      }),
    );
    const routes = [jobRoutes, ensembleRoutes, outputRoutes(blocks), portRoutes(tunnels.forwards), resourceRoutes, deviceRoutes, peerRoutes, pluginRoutes(pluginActors)];
    // Within the step: a route a plugin cannot add stops what started.
    const http = await order.step(
      'rest',
      () => listen(createApp({ config, system, http: httpActor.api, log, routes, apiKeys: security.apiKeys, version: NODE_VERSION, stages, volumes: blocks.volumes }), config),
      (h) => h.close(),
    );
    const paths = homePaths(home);
    await order.step(
      'runtime file',
      () => writeRuntimeInfo(paths, system, http.url, opts.overrides),
      () => rmSync(paths.runtime, { force: true }),
    );
    log.info({ url: http.url, did: keys.node.did, peer_id: system.host, operator: keys.operator.did }, 'node started');
    return new DmsNode(system, http, config, home, blocks, log, order);
  }

  async stop(): Promise<void> {
    this.log.info('node stopping');
    await this.order.stop();
    this.log.info('node stopped');
  }
}

async function startNetwork(system: ActorSystem, config: Config, log: Logger, key: KeyPair): Promise<Libp2pTransport> {
  const net = config.network;
  let transport: Libp2pTransport;
  try {
    // Loaded here: a node with the network off never pays for the libp2p stack.
    const { Libp2pTransport } = await import('../runtime/network/libp2p-transport.js');
    transport = await Libp2pTransport.create({
      keyPair: key,
      listen: net.ListenAddresses,
      bootstrap: net.BootstrapPeers,
      protocolId: net.ProtocolID,
      enableMdns: net.EnableMDNS,
      maxEnvelopeBytes: net.MaxEnvelopeBytes,
      maxConnections: net.MaxConnections,
      dhtMessageRates: { perPeer: net.DHTMessagesPerSecond, perHost: net.DHTMessagesPerSecondPerHost },
      log,
    });
  } catch (e) {
    throw listenError(e) ?? e;
  }
  system.attachTransport(transport);
  system.metrics?.gauge('dms_gossip_messages', 'Gossip messages that reached this node since it started, by what became of them: accepted, over_relay_rate or over_publisher_rate (dropped unchecked: a peer past its rate), expired, rejected (invalid)', ['outcome'], (set) => {
    for (const [outcome, count] of Object.entries(transport.stats().gossip)) set({ outcome }, count);
  });
  return transport;
}

/** Tunnels to ensemble parts on other nodes, over this node's libp2p (loaded with it). */
function ensembleTunnels(transport: Libp2pTransport) {
  return {
    async open(peer: string, req: { job_id: string; port: number }) {
      const [{ openTunnel }, { peerIdFromString }] = await Promise.all([import('../runtime/network/tunnel.js'), import('@libp2p/peer-id')]);
      return openTunnel(transport.node, peerIdFromString(peer), req);
    },
  };
}

/** `<home>/runtime.json`: how `dms` finds this running node (its pid, URL, identity, addresses). */
function writeRuntimeInfo(paths: ReturnType<typeof homePaths>, system: ActorSystem, url: string, overrides?: ConfigOverride[]): void {
  makeDirs(paths.root);
  const info: RuntimeInfo = {
    pid: process.pid,
    url,
    did: system.key.did,
    peer_id: system.host,
    addrs: system.network?.addrs() ?? [],
    started_at: new Date().toISOString(),
    // `--port 0` asked for any port: the one it got is what is in effect.
    ...(overrides?.length ? { overrides: overrides.map((o) => (o.key === 'rest.port' && o.value === 0 ? { ...o, value: Number(new URL(url).port) } : o)) } : {}),
  };
  writeJsonAtomic(paths.runtime, info);
}

/**
 * A libp2p listen failure said in the node's own terms: the setting to change, the address
 * that failed and why, and how to pick another (the same address on a free port). Two nodes
 * on one machine both asking for the default port is the usual cause.
 */
function listenError(e: unknown): DmsError | undefined {
  const [failed] = listenFailures(e);
  if (!failed) return undefined;
  const instead = /\/tcp\/\d+/.test(failed.address) ? failed.address.replace(/\/tcp\/\d+/, '/tcp/0') : '/ip4/0.0.0.0/tcp/0';
  return new DmsError(
    'unavailable',
    `network.ListenAddresses: cannot listen on ${failed.address} (${failed.reason}); pick another with DMS_NETWORK_LISTEN_ADDRESSES=${instead} or --listen`,
    { cause: e },
  );
}
