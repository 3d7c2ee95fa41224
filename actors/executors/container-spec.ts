/**
 * The container a job becomes: its limits, labels, mounts and network, decided from the job and
 * the node's settings alone (no engine), so the mapping can be checked without Docker.
 */
import type Docker from 'dockerode';
import type { OutputSpec } from '../../behaviors/jobs/files.js';
import { type Job, millicoresOf, RESOURCE_FLOOR, runEnvironment } from '../../behaviors/jobs/schema.js';
import { STORAGE_LABEL, storageBound, VOLUMES_LABEL, type WatchedVolume } from './storage-watch.js';

export const JOB_LABEL = 'dms.job';
export const NODE_LABEL = 'dms.node';
/** What a restarted node needs to collect a job's outputs when its container ends: the outputs asked, and for whom. */
export const OUTPUTS_LABEL = 'dms.outputs';
export const REQUESTER_LABEL = 'dms.requester';
/** The ensemble and part a container is (README "Names between parts"): a restarted node finds its parts' networks' users by them. */
export const ENSEMBLE_LABEL = 'dms.ensemble';
export const PART_LABEL = 'dms.part';

/** Where a part's container is attached (the ensemble-net actor's answer): its networks, the first as NetworkMode, and its names. */
export interface PartNetworks {
  networks: string[];
  /** `<part>.internal:<ip>` lines for its /etc/hosts. */
  extraHosts: string[];
}

/** What bounds every container (`jobs.default_resources`, `jobs.pids_limit`, `jobs.max_log_bytes`). */
export interface ContainerLimits {
  /** Cores for a job that asks for none. */
  defaultCores: number;
  /** Memory for a job that asks for none: no container runs without a memory limit. */
  defaultMemoryBytes: number;
  /** Most processes at once: a fork bomb stops there instead of exhausting the host's pids. */
  pids: number;
  /** The engine's own copy of the output (json-file) is kept to about this size too. */
  logBytes: number;
  /**
   * Whether jobs run for other nodes (`job.requester` set) get a network (`jobs.allow_network`).
   * Without, their containers have none: a stranger's code would otherwise reach this machine's
   * LAN and cloud metadata (169.254.169.254) from inside it.
   */
  allowNetwork: boolean;
  /** The user every container runs as (`jobs.container_user`, e.g. "65534:65534"); empty: the image's own. */
  user: string;
  /** Whether the container's root filesystem is read-only (`jobs.read_only_root`); /tmp is then a small tmpfs. */
  readOnlyRoot: boolean;
  /** What a job that reserves no storage may write into its container (`jobs.default_resources.storage_bytes`; ./storage-watch.ts). */
  storageBytes: number;
}

export const DEFAULT_CONTAINER_LIMITS: ContainerLimits = {
  defaultCores: 1,
  defaultMemoryBytes: 512 * 1024 * 1024,
  pids: 1024,
  logBytes: 64 * 1024 * 1024,
  allowNetwork: false,
  user: '',
  readOnlyRoot: false,
  storageBytes: 1024 * 1024 * 1024,
};

/** The writable /tmp a read-only root gets; tmpfs pages count against the job's memory limit. */
const READ_ONLY_TMP = 'rw,nosuid,nodev,size=64m';

/** The container a job becomes. Exported so its mapping of resources can be checked without an engine. */
export function containerSpec(job: Job, nodeId: string, limits: ContainerLimits = DEFAULT_CONTAINER_LIMITS, binds: string[] = [], part?: PartNetworks, volumes: readonly WatchedVolume[] = []): Docker.ContainerCreateOptions {
  const { gpu } = job.resources;
  // The orchestrator stores jobs with defaults filled in; a job stored before that still gets them.
  // Never 0 (the engine's "unlimited") and never below what the engine accepts, whatever reached
  // the job's record: the same whole millicores, rounded up, that the ledger holds for it.
  const millicores = millicoresOf(job.resources.cpu.cores > 0 ? job.resources.cpu.cores : limits.defaultCores);
  const asked = job.resources.memory.size > 0 ? job.resources.memory.size : limits.defaultMemoryBytes;
  const memory = Math.max(RESOURCE_FLOOR.memoryBytes, asked);
  // Placed here by another node: its code is a stranger's, and this node's network is not its to use.
  const isolated = job.requester !== null && !limits.allowNetwork;
  return {
    Image: job.image,
    // An empty command keeps the image's own CMD.
    Cmd: job.command.length > 0 ? job.command : undefined,
    Env: Object.entries(runEnvironment(job)).map(([name, value]) => `${name}=${value}`),
    Labels: {
      [JOB_LABEL]: job.id,
      [NODE_LABEL]: nodeId,
      ...(part && job.ensemble && job.part ? { [ENSEMBLE_LABEL]: job.ensemble, [PART_LABEL]: job.part } : {}),
      [STORAGE_LABEL]: String(storageBound(job.resources.storage.size, limits.storageBytes)),
      ...(volumes.length ? { [VOLUMES_LABEL]: JSON.stringify(volumes) } : {}),
      ...(job.outputs?.length ? { [OUTPUTS_LABEL]: JSON.stringify(job.outputs.map(({ name, path }) => ({ name, path }))), [REQUESTER_LABEL]: job.requester ?? '' } : {}),
    },
    User: limits.user || undefined,
    // Without a TTY the engine keeps stdout and stderr apart in one multiplexed stream.
    Tty: false,
    OpenStdin: false,
    AttachStdin: false,
    AttachStdout: false,
    AttachStderr: false,
    HostConfig: {
      NanoCpus: millicores * 1e6,
      Memory: memory,
      // Equal to Memory: no swap on top, so a job over its limit is killed rather than slowed.
      MemorySwap: memory,
      PidsLimit: limits.pids,
      // A setuid binary in the image cannot give the job more privileges than it started with.
      SecurityOpt: ['no-new-privileges'],
      // Root in the container keeps none of root's powers (raw sockets, mounts, chown of others' files).
      CapDrop: ['ALL'],
      // A job with ports must be reachable by the node's tunnels: it gets a network of its own,
      // internal (no route out), instead of none (jobNetwork).
      // A part of an ensemble joins its ensemble's networks only, whoever's job it is: internal too,
      // so it reaches its ensemble's names and nothing else (the others are joined before start).
      NetworkMode: part ? part.networks[0] : isolated ? (job.ports.length > 0 ? jobNetworkName(job.id) : 'none') : undefined,
      ExtraHosts: part?.extraHosts.length ? part.extraHosts : undefined,
      ReadonlyRootfs: limits.readOnlyRoot,
      Tmpfs: limits.readOnlyRoot ? { '/tmp': READ_ONLY_TMP } : undefined,
      // The engine keeps its own copy of the output; without a bound it grows with the output.
      LogConfig: { Type: 'json-file', Config: { 'max-size': String(limits.logBytes), 'max-file': '2' } },
      DeviceRequests: gpu ? [{ Driver: 'nvidia', Count: gpu.count, Capabilities: [['gpu']] }] : undefined,
      // The job's inputs, read-only (./inputs.ts).
      Binds: binds.length ? binds : undefined,
    },
  };
}

/** The per-job network of an isolated job that declares ports. */
export const jobNetworkName = (jobId: string): string => `dms-job-${jobId}`;

/**
 * The address the node reaches a job's ports at: its container's IP on its network. Checked by
 * experiment: the host reaches a container on an `--internal` network (the bridge still has the
 * host's side of it; only the route out is missing), so no port needs publishing on the host.
 */
export async function containerAddress(docker: Docker, containerId: string): Promise<string | undefined> {
  const info = await docker.getContainer(containerId).inspect();
  for (const net of Object.values(info.NetworkSettings?.Networks ?? {})) if (net?.IPAddress) return net.IPAddress;
  return undefined;
}

/** The outputs a container's labels say to collect, and for whom; none when they say nothing readable. */
export function filesOf(labels: Record<string, string>): { outputs: OutputSpec[]; requester: string | null } | undefined {
  try {
    const outputs = JSON.parse(labels[OUTPUTS_LABEL] ?? '[]') as OutputSpec[];
    return Array.isArray(outputs) ? { outputs, requester: labels[REQUESTER_LABEL] || null } : undefined;
  } catch {
    return undefined;
  }
}
