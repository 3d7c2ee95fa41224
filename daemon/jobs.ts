/**
 * The part of the composition root that makes a node run jobs: its database, the executors,
 * the resource manager and the orchestrator, started in the order they depend on each other
 * and stopped so that every write made is committed before the database closes.
 */
import { hostname } from 'node:os';
import { join } from 'node:path';
import { DockerExecutor } from '../actors/executors/docker.js';
import { installExecutorGuard } from '../actors/executors/guard.js';
import { NullExecutor } from '../actors/executors/null.js';
import { ExecutorRegistry } from '../actors/executors/registry.js';
import { Orchestrator } from '../actors/orchestrator/orchestrator.js';
import { measureCapacity } from '../actors/resources/capacity.js';
import { ResourceManager } from '../actors/resources/manager.js';
import type { Config } from '../runtime/config.js';
import { homePaths } from '../runtime/home.js';
import type { Logger } from '../runtime/log.js';
import type { ActorSystem } from '../runtime/system.js';
import { type Authority, ownKeys } from '../runtime/capability/authority.js';
import type { Envelope } from '../runtime/wire/envelope.js';
import { openStorage, type Storage } from '../storage/index.js';

export interface JobsOptions {
  system: ActorSystem;
  config: Config;
  home: string;
  log: Logger;
  /** Whose envelopes see job environments: the node's own keys and the authority's roots. */
  authority?: Pick<Authority, 'isRoot'>;
}

export interface Jobs {
  storage: Storage;
  resources: ResourceManager;
  orchestrator: Orchestrator;
  /** The executors jobs can run with, which the node's profile publishes. */
  executors: ExecutorRegistry;
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

export async function startJobs({ system, config, home, log, authority }: JobsOptions): Promise<Jobs> {
  const paths = homePaths(home);
  const storage = await openStorage(databasePath(config, home));
  // Before any executor runs: from here on an executor's fault fails its job, not the node.
  const unguard = installExecutorGuard(log);
  try {
    const jobs = config.jobs;
    // Both executors keep output in one directory: job ids are unique across them.
    const logsDir = join(paths.data, 'job-logs');
    const executors = new ExecutorRegistry();
    executors.register(
      new DockerExecutor({
        nodeId: system.host,
        logsDir,
        maxLogBytes: jobs.max_log_bytes,
        stopGraceSeconds: jobs.stop_grace_s,
        limits: {
          defaultCores: jobs.default_resources.cores,
          defaultMemoryBytes: jobs.default_resources.memory_bytes,
          pids: jobs.pids_limit,
          logBytes: jobs.max_log_bytes,
        },
      }),
    );
    executors.register(new NullExecutor({ logsDir, maxLogBytes: jobs.max_log_bytes }));
    const capacity = await measureCapacity({ dataDir: paths.data });
    const resources = await ResourceManager.spawn(system, { storage, capacity, defaultName: config.general.name || hostname(), log });
    const orchestrator = await Orchestrator.spawn(system, {
      storage,
      executors,
      log,
      defaultResources: jobs.default_resources,
      allowedRegistries: jobs.allowed_registries,
      trusted: trustedBy(system, authority),
    });
    return {
      storage,
      resources,
      orchestrator,
      executors,
      stop: async () => {
        await orchestrator.halt();
        await storage.close();
        unguard();
      },
    };
  } catch (e) {
    unguard();
    await storage.close();
    throw e;
  }
}
