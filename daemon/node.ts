import { mkdirSync, rmSync } from 'node:fs';
import { hostname } from 'node:os';
import { NODE_VERSION, spawnRootActor, ROOT_INBOX } from '../actors/node.js';
import { Discovery } from '../actors/discovery.js';
import { HttpActor, HTTP_INBOX } from '../http/actor.js';
import { createApp } from '../http/app.js';
import { listen, type Listening } from '../http/server.js';
import { type Component, makeActor } from '../runtime/component.js';
import { allowsUnsigned, type Config } from '../runtime/config.js';
import { DmsError } from '../runtime/errors.js';
import { writeJsonAtomic } from '../runtime/files.js';
import { homePaths, initHome, type RuntimeInfo } from '../runtime/home.js';
import type { Logger } from '../runtime/log.js';
import { ReplayLog } from '../runtime/replay-log.js';
import { ActorSystem } from '../runtime/system.js';
import { listenFailures } from '../runtime/network/listen-failure.js';
import { Libp2pTransport } from '../runtime/network/transport.js';
import { loadPlugins } from './plugins.js';
import { deviceRoutes } from '../http/routes/device.js';
import { jobRoutes } from '../http/routes/jobs.js';
import { resourceRoutes } from '../http/routes/resources.js';
import { type Jobs, startJobs } from './jobs.js';
import { closeSecurity, setUpSecurity } from './security.js';

export interface NodeOptions {
  home: string;
  config: Config;
  log: Logger;
}

/**
 * One running DMS node: the composition root that wires the kernel, the component actors and
 * the HTTP actor together. Nothing else knows all of them.
 */
export class DmsNode {
  private constructor(
    readonly system: ActorSystem,
    readonly http: Listening,
    readonly config: Config,
    readonly home: string,
    private readonly log: Logger,
    private readonly jobs: Jobs,
    private readonly discovery: Component,
  ) {}

  get url(): string {
    return this.http.url;
  }

  static async start(opts: NodeOptions): Promise<DmsNode> {
    const { config, log } = opts;
    const keys = initHome(opts.home);
    const system = new ActorSystem({
      key: keys.node,
      log,
      mailbox: { capacity: config.actor.mailbox_capacity, concurrency: config.actor.mailbox_concurrency },
      replay: ReplayLog.open(homePaths(opts.home).replayLog, { capacity: config.actor.replay_capacity, perSender: config.actor.replay_per_sender }),
      maxTtlS: config.actor.max_ttl_s,
    });
    // Before the network can deliver anything: every envelope passes the capability checks.
    const security = setUpSecurity({ system, config, home: opts.home, operator: keys.operator, log });
    let transport: Libp2pTransport | undefined;
    if (config.network.enabled) {
      const net = config.network;
      // The network comes up before the actors so their topic subscriptions reach gossipsub.
      try {
        transport = await Libp2pTransport.create({
          keyPair: keys.node,
          listen: net.ListenAddresses,
          bootstrap: net.BootstrapPeers,
          protocolId: net.ProtocolID,
          enableMdns: net.EnableMDNS,
          maxEnvelopeBytes: net.MaxEnvelopeBytes,
          log,
        });
      } catch (e) {
        await system.stop();
        throw listenError(e) ?? e;
      }
      system.attachTransport(transport);
    }
    const root = spawnRootActor(system);
    try {
      const plugins = await loadPlugins(system, config.plugins.modules, opts.home);
      if (plugins.length) log.info({ plugins: plugins.map((p) => p.name) }, 'plugins loaded');
    } catch (e) {
      await system.stop();
      throw e;
    }
    let jobs: Jobs;
    try {
      jobs = await startJobs({ system, config, home: opts.home, log, authority: security.authority });
    } catch (e) {
      await system.stop();
      throw e;
    }
    // After the jobs component, whose executors the node's profile names. Peers that connected
    // meanwhile are greeted when it starts.
    let discovery: Component;
    try {
      discovery = await makeActor(system, Discovery, {
        network: transport,
        bootstrap: config.network.BootstrapPeers,
        aliases: [root],
        profile: { version: NODE_VERSION, executors: jobs.executors.names(), fallbackName: config.general.name || hostname() },
      });
      await discovery.start();
    } catch (e) {
      await jobs.stop();
      await system.stop();
      throw e;
    }
    const httpActor = new HttpActor(system, system.spawn({ inbox: HTTP_INBOX }), {
      operator: keys.operator,
      allowUnsigned: allowsUnsigned(config),
      maxPending: config.rest.max_pending,
      maxBroadcastReplies: config.rest.max_broadcast_replies,
      maxBroadcastBytes: config.rest.max_broadcast_bytes,
      maxPendingBytesPerClient: config.rest.max_pending_bytes_per_client,
      roles: config.rest.roles,
      openTopics: config.capabilities.open_topics,
      rootInbox: ROOT_INBOX,
      precheck: security.precheck,
      provide: security.provide,
    });
    const routes = [jobRoutes, resourceRoutes, deviceRoutes, ];
    const app = createApp({ config, system, http: httpActor, log, routes, apiKeys: security.apiKeys });
    let http: Listening;
    try {
      http = await listen(app, config);
    } catch (e) {
      await discovery.stop();
      await jobs.stop();
      await system.stop();
      throw e;
    }
    const node = new DmsNode(system, http, config, opts.home, log, jobs, discovery);
    node.writeRuntimeInfo();
    log.info({ url: http.url, did: keys.node.did, peer_id: system.host, operator: keys.operator.did }, 'node started');
    return node;
  }

  private writeRuntimeInfo(): void {
    const paths = homePaths(this.home);
    mkdirSync(paths.root, { recursive: true });
    const info: RuntimeInfo = {
      pid: process.pid,
      url: this.http.url,
      did: this.system.key.did,
      peer_id: this.system.host,
      addrs: this.system.network?.addrs() ?? [],
      started_at: new Date().toISOString(),
    };
    writeJsonAtomic(paths.runtime, info);
  }

  async stop(): Promise<void> {
    this.log.info('node stopping');
    await this.http.close();
    // Its peer machines hold timers (redial, hello retry) that would outlive the node.
    await this.discovery.stop();
    await this.jobs.stop();
    await this.system.stop();
    closeSecurity(this.system);
    rmSync(homePaths(this.home).runtime, { force: true });
    this.log.info('node stopped');
  }
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
