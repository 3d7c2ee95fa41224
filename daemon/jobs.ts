/**
 * The part of the composition root that makes a node run jobs: its database, the executor
 * actors, the resource manager and the orchestrator, started in the order they depend on each
 * other (StartOrder) and stopped in reverse, so every write made is committed before the
 * database closes.
 */
import { hostname } from 'node:os';
import { join } from 'node:path';
import { DeploymentActor } from '../actors/deployment/actor.js';
import { EnsemblesActor } from '../actors/ensembles/actor.js';
import { ENSEMBLE_INBOX } from '../behaviors/ensembles/schema.js';
import { DockerExecutorActor, NullExecutorActor, RemoteFollowerActor } from '../actors/executors/actor.js';
import { REMOTE_EXECUTOR } from '../actors/executors/remote.js';
import { OrchestratorActor } from '../actors/orchestrator/orchestrator.js';
import { measureCapacity } from '../actors/resources/capacity.js';
import { ResourceManagerActor } from '../actors/resources/manager.js';
import { executorInbox } from '../behaviors/jobs/executor.js';
import { DEPLOYMENT_INBOX } from '../behaviors/jobs/deployment.js';
import { ORCHESTRATOR_INBOX } from '../behaviors/jobs/jobs.js';
import { RESOURCES_INBOX } from '../behaviors/jobs/resources.js';
import { makeActor } from '../runtime/component.js';
import type { Config } from '../runtime/config.js';
import { homePaths } from '../runtime/home.js';
import type { Logger } from '../runtime/log.js';
import { StartOrder } from '../runtime/start-order.js';
import type { PluginExecutorActor } from './plugins.js';
import type { ActorSystem } from '../runtime/system.js';
import { type Authority, ownKeys } from '../runtime/capability/authority.js';
import type { Envelope } from '../runtime/wire/envelope.js';
import { parseCid } from '../runtime/blocks/cid.js';
import { openStorage, type Storage } from '../storage/index.js';
import { providerTrust } from '../actors/orchestrator/trust.js';
import { OutputCollector } from '../actors/executors/outputs.js';
import { JobLogs } from '../actors/executors/logfile.js';
import { InputMounter } from '../actors/executors/inputs.js';
import { OutputsActor } from '../actors/outputs/actor.js';
import { OUTPUTS_INBOX } from '../behaviors/jobs/manifest.js';
import type { NodeBlocks } from './blocks.js';

export interface JobsOptions {
  system: ActorSystem;
  config: Config;
  home: string;
  log: Logger;
  /** Whose envelopes see job environments: the node's own keys and the authority's roots. */
  authority?: Pick<Authority, 'isRoot'>;
  /** Executors plugins bring (daemon/plugins.ts): started with the built-in ones, before the orchestrator, which may choose them. */
  pluginExecutors?: readonly PluginExecutorActor[];
  /** Where job outputs go and their manifests are kept (./blocks.ts); without, outputs are not collected. */
  blocks?: NodeBlocks;
}

export interface Jobs {
  storage: Storage;
  /** The executors jobs can run with (actors at executor/<name>), which the node's profile publishes. */
  executors: { names(): string[] };
  /** Stops placing and following jobs (their runs go on), commits what is pending, closes the database. */
  stop(): Promise<void>;
}

/** The database file: `db.path`, else dms.sqlite in the node's home. */
export const databasePath = (config: Config, home: string): string => config.db.path || join(homePaths(home).root, 'dms.sqlite');

/** The node's own actors and its root identities; everyone else sees jobs redacted. */
function trustedBy(system: ActorSystem, authority?: Pick<Authority, 'isRoot'>) {
  const own = ownKeys(system);
  return (env: Envelope) => own(env.from.id) || (authority?.isRoot(env.from.did) ?? false);
}

/** The executors every node has. */
export const BUILTIN_EXECUTORS = ['docker', 'null'] as const;

export async function startJobs({ system, config, home, log, authority, pluginExecutors = [], blocks }: JobsOptions): Promise<Jobs> {
  const paths = homePaths(home);
  const jobs = config.jobs;
  const order = new StartOrder(log);
  const storage = await order.step('storage', () => openStorage(databasePath(config, home)), (s) => s.close());
  // A volume a job not yet ended mounts is not deleted (nor snapshotted while one writes it).
  blocks?.volumes.usersFrom((name) => storage.jobs.mounting(name));
  // Retention keeps the content a job not yet ended names: it is fetched when the job starts.
  blocks?.keepAlso(async () => (await storage.jobs.inputsUnderWay()).flatMap((c) => {
    try {
      return [parseCid(c)];
    } catch {
      return [];
    }
  }));
  // Before the orchestrator, which asks them what a previous process left. Both keep output in
  // one directory: job ids are unique across them.
  const logsDir = join(paths.data, 'job-logs');
  const collector = blocks && new OutputCollector({ blocks: blocks.store, manifests: blocks.manifests, key: system.key, maxOutputBytes: blocks.limits.max_output_bytes, announce: blocks.exchange && ((root) => blocks.exchange!.announce(root)), log });
  // Every executor but Docker hands its outputs back to its actor, which collects them with this.
  const logPaths = new JobLogs(logsDir);
  const outputCollection = collector && { collector, logPath: (jobId: string) => logPaths.path(jobId) };
  let pulledImages = { bytes: 0, count: 0 };
  system.metrics?.gauge('dms_pulled_images', `What the images this node pulled for jobs hold (bytes; at most jobs.max_images_bytes, ${jobs.max_images_bytes}) and how many there are (images), as last measured (actors/executors/image-cache.ts)`, ['measure'], (set) => {
    set({ measure: 'bytes' }, pulledImages.bytes);
    set({ measure: 'images' }, pulledImages.count);
  });
  await order.component(executorInbox('docker'), () =>
    makeActor(system, DockerExecutorActor, {
      nodeId: system.host,
      logsDir,
      maxLogBytes: jobs.max_log_bytes,
      stopGraceSeconds: jobs.stop_grace_s,
      oomSettleMs: jobs.oom_settle_ms,
      storageCheckMs: jobs.storage_check_ms,
      images: { file: join(paths.data, 'images.json'), maxBytes: jobs.max_images_bytes, report: (held) => (pulledImages = held) },
      limits: {
        defaultCores: jobs.default_resources.cores,
        defaultMemoryBytes: jobs.default_resources.memory_bytes,
        pids: jobs.pids_limit,
        logBytes: jobs.max_log_bytes,
        allowNetwork: jobs.allow_network,
        user: jobs.container_user,
        readOnlyRoot: jobs.read_only_root,
        storageBytes: jobs.default_resources.storage_bytes,
      },
      inputs: blocks && new InputMounter({ blocks: blocks.store, exchange: blocks.exchange, dir: join(paths.data, 'inputs'), volumes: blocks.volumes, maxBytes: blocks.limits.max_input_bytes }),
      outputs: collector,
    }),
  );
  await order.component(executorInbox('null'), () => makeActor(system, NullExecutorActor, { logsDir, maxLogBytes: jobs.max_log_bytes, outputCollection }));
  for (const ex of pluginExecutors) {
    await order.component(executorInbox(ex.name), () => makeActor(system, ex.definition, { logsDir, maxLogBytes: jobs.max_log_bytes, outputCollection }));
  }
  const executors = [...BUILTIN_EXECUTORS, ...pluginExecutors.map((e) => e.name)];
  // With a network, jobs may leave this node and others' jobs may come: the remote executor
  // follows the former, the deployment actor places them and takes the latter.
  const network = system.network;
  const trusts = providerTrust(config.placement.trust, system.host, authority);
  if (network) {
    await order.component(executorInbox(REMOTE_EXECUTOR), () =>
      makeActor(system, RemoteFollowerActor, {
        logsDir,
        maxLogBytes: jobs.max_log_bytes,
        trusts,
        cancelBoundMs: config.placement.cancel_bound_ms,
        lostAfterMs: config.deployment.lost_after_ms,
        pollWaitMs: config.deployment.follow_poll_ms,
        manifests: blocks?.manifests,
        cancels: storage.cancels,
      }),
    );
  }
  const capacity = await order.step('capacity', () => measureCapacity({ dataDir: paths.data }));
  await order.component(RESOURCES_INBOX, () =>
    makeActor(system, ResourceManagerActor, {
      storage,
      capacity,
      defaultName: config.general.name || hostname(),
      blocks: blocks?.store,
      volumes: blocks?.volumes,
      images: () => ({ ...pulledImages, max_bytes: jobs.max_images_bytes }),
    }),
  );
  await order.component(ORCHESTRATOR_INBOX, () =>
    makeActor(system, OrchestratorActor, {
      storage,
      executors,
      defaultResources: jobs.default_resources,
      allowedRegistries: jobs.allowed_registries,
      trusted: trustedBy(system, authority),
      ...(network ? { peers: () => network.peers().length, onPeerJoined: (fn: () => void) => network.onPeer?.((e) => e.connected && fn()) ?? (() => {}) } : {}),
      offerBackoff: { firstMs: config.deployment.offer_retry_ms, maxMs: config.deployment.max_offer_backoff_ms },
      manifests: blocks?.manifests,
      unfinished: { jobs: jobs.max_unfinished, bytes: jobs.max_unfinished_bytes },
    }),
  );
  const d = config.deployment;
  const limits = { leaseMs: d.lease_ms, leaseShare: d.lease_share, maxLeases: d.max_unstarted_leases };
  // Without a network too: it keeps the revocations of read rights this node grants (REST), for when it has one.
  if (blocks) await order.component(OUTPUTS_INBOX, () => makeActor(system, OutputsActor, { manifests: blocks.manifests, trust: authority }));
  if (network) await order.component(DEPLOYMENT_INBOX, () => makeActor(system, DeploymentActor, { executors, network, limits, trusts, directBidPeers: d.direct_bid_peers, bidWindowMs: d.bid_window_ms, unfollowedAskMs: d.unfollowed_ask_ms }));
  // After the orchestrator (which holds its parts' jobs) and the deployment actor (which places them).
  await order.component(ENSEMBLE_INBOX, () =>
    makeActor(system, EnsemblesActor, {
      storage,
      network: !!network,
      backoff: { firstMs: config.deployment.offer_retry_ms, maxMs: config.deployment.max_offer_backoff_ms },
      maxLive: config.ensembles.max_live,
    }),
  );
  return { storage, executors: { names: () => [...executors] }, stop: () => order.stop() };
}
