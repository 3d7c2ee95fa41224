/**
 * What a Docker job may write into its container's own filesystem (README "Docker jobs"). The
 * engine bounds a container's CPU, memory and processes, but its writable layer only on file
 * systems this machine rarely has (overlay2 on XFS with project quotas): a job, a stranger's
 * included, could fill the provider's disk, whatever storage it reserved. So while it runs, the
 * engine is asked every `jobs.storage_check_ms` how much the container wrote (`SizeRw`), and a
 * job past its bound is stopped: `killed: wrote …`. The bound is the storage the job reserved
 * (`resources.storage`), or `jobs.default_resources.storage_bytes` when it reserved none. It is a
 * check, not a quota: a job writing fast may pass its bound by what it writes in one period.
 *
 * A volume a job mounts writable is bound the same way by its size (runtime/volumes.ts): its
 * directory is measured at each check and once more when the job ends, since what a job wrote
 * there outlives its container. A walk that took long spaces the next one out, so measuring a
 * large volume costs at most a tenth of one of libuv's threads.
 */
import type Docker from 'dockerode';
import { formatBytes } from '../../runtime/bytes.js';
import { errorText } from '../../runtime/errors.js';
import { diskUsage, MAX_WALK_ENTRIES } from '../../runtime/volumes.js';
import { answered, type Engine, statusOf } from './engine.js';

/** The container's bound, in bytes, as a label: a run picked up after a restart is watched as before it. */
export const STORAGE_LABEL = 'dms.storage';

/** The writable volumes a container mounts, as a label: a run picked up after a restart measures them as before it. */
export const VOLUMES_LABEL = 'dms.volumes';

/** A volume a job mounts writable: its name, its directory on this node, and the size it may hold. */
export interface WatchedVolume {
  name: string;
  dir: string;
  size: number;
}

/** The writable volumes a container's labels name; none for one that names none readably. */
export function volumesOf(labels: Record<string, string>): WatchedVolume[] {
  try {
    const all = JSON.parse(labels[VOLUMES_LABEL] ?? '[]') as WatchedVolume[];
    return Array.isArray(all) ? all.filter((v) => typeof v?.name === 'string' && typeof v.dir === 'string' && Number.isSafeInteger(v.size)) : [];
  } catch {
    return [];
  }
}

/**
 * Why the first of `volumes` past its size is (as the job's error says after `killed: `), or
 * undefined when all are within theirs. A volume the node cannot read into counts as past it: a
 * job that made part of it unreadable would otherwise write there unmeasured.
 */
export async function volumeOver(volumes: readonly WatchedVolume[]): Promise<string | undefined> {
  for (const v of volumes) {
    let usage;
    try {
      usage = await diskUsage(v.dir, v.size);
    } catch (e) {
      return `volume ${v.name} could not be measured against its size: ${errorText(e)}`;
    }
    if (usage.unreadable) return `volume ${v.name} holds ${usage.unreadable}, which the node cannot read: what a job writes into a volume is measured against its size`;
    if (usage.tooMany) return `volume ${v.name} holds more than ${MAX_WALK_ENTRIES} files and directories, more than the node measures against its size`;
    if (usage.bytes > v.size) return `wrote into volume ${v.name} until it held more than its size, ${formatBytes(v.size)} (at least ${formatBytes(usage.bytes)} counted)`;
  }
  return undefined;
}

/** The bytes a job may write into its container: what it reserved, else the node's default. */
export function storageBound(reserved: number, unreserved: number): number {
  return reserved > 0 ? reserved : unreserved;
}

/** The bound a container's labels give; undefined for one made before there was one. */
export function storageBoundOf(labels: Record<string, string>): number | undefined {
  const n = Number(labels[STORAGE_LABEL]);
  return Number.isSafeInteger(n) && n > 0 ? n : undefined;
}

/** Why a job past its bound was stopped, as its error says after `killed: `. */
export function overStorage(written: number, bound: number): string {
  return `wrote ${formatBytes(written)} into its container, more than the ${formatBytes(bound)} it may (resources.storage, dms run --disk; jobs.default_resources.storage_bytes when it reserves none)`;
}

/**
 * Asks the engine, every `everyMs`, what `container` wrote, and measures the volumes it writes,
 * until stopped or the container is gone; tells `over` once, when it is past `bound` (when there
 * is one) or a volume past its size. A check the engine leaves unanswered is tried again at the
 * next period: the run's own watch decides what a silent engine means.
 */
export class StorageWatch {
  private timer: NodeJS.Timeout | undefined;
  private stopped = false;
  /** How long the last volumes' walk took: the next waits at least ten times as long. */
  private walkMs = 0;

  constructor(
    private readonly engine: Engine,
    private readonly container: Docker.Container,
    private readonly bound: number | undefined,
    private readonly volumes: readonly WatchedVolume[],
    private readonly everyMs: number,
    private readonly over: (reason: string) => void,
  ) {
    this.next();
  }

  stop(): void {
    this.stopped = true;
    clearTimeout(this.timer);
  }

  private next(): void {
    if (this.stopped) return;
    this.timer = setTimeout(() => void this.check(), Math.max(this.everyMs, 10 * this.walkMs));
    // A node with only watched jobs left still stops when asked.
    this.timer.unref();
  }

  private async check(): Promise<void> {
    const reason = (await this.containerOver()) ?? (await this.volumesOver());
    if (this.stopped) return;
    if (reason) {
      this.stop();
      this.over(reason);
      return;
    }
    this.next();
  }

  private async containerOver(): Promise<string | undefined> {
    if (this.bound === undefined) return undefined;
    let written: number | undefined;
    try {
      const info = await answered(this.engine, "measuring the container's filesystem", (abortSignal) => this.container.inspect({ size: true, abortSignal } as Docker.ContainerInspectOptions));
      written = (info as { SizeRw?: number }).SizeRw;
    } catch (e) {
      if (statusOf(e) === 404) this.stop();
    }
    return written !== undefined && written > this.bound ? overStorage(written, this.bound) : undefined;
  }

  private async volumesOver(): Promise<string | undefined> {
    if (this.stopped || this.volumes.length === 0) return undefined;
    const start = performance.now();
    const reason = await volumeOver(this.volumes);
    this.walkMs = performance.now() - start;
    return reason;
  }
}
