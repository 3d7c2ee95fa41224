/**
 * What a Docker job may write into its container's own filesystem (README "Docker jobs"). The
 * engine bounds a container's CPU, memory and processes, but its writable layer only on file
 * systems this machine rarely has (overlay2 on XFS with project quotas): a job, a stranger's
 * included, could fill the provider's disk, whatever storage it reserved. So while it runs, the
 * engine is asked every `jobs.storage_check_ms` how much the container wrote (`SizeRw`), and a
 * job past its bound is stopped: `killed: wrote …`. The bound is the storage the job reserved
 * (`resources.storage`), or `jobs.default_resources.storage_bytes` when it reserved none. It is a
 * check, not a quota: a job writing fast may pass its bound by what it writes in one period.
 */
import type Docker from 'dockerode';
import { formatBytes } from '../../runtime/bytes.js';
import { answered, type Engine, statusOf } from './engine.js';

/** The container's bound, in bytes, as a label: a run picked up after a restart is watched as before it. */
export const STORAGE_LABEL = 'dms.storage';

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
  return `wrote ${formatBytes(written)} into its container, more than the ${formatBytes(bound)} it may (resources.storage; jobs.default_resources.storage_bytes when it reserves none)`;
}

/**
 * Asks the engine, every `everyMs`, what `container` wrote, until stopped or the container is
 * gone; tells `over` once, when it is past `bound`. A check the engine leaves unanswered is
 * tried again at the next period: the run's own watch decides what a silent engine means.
 */
export class StorageWatch {
  private timer: NodeJS.Timeout | undefined;
  private stopped = false;

  constructor(
    private readonly engine: Engine,
    private readonly container: Docker.Container,
    private readonly bound: number,
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
    this.timer = setTimeout(() => void this.check(), this.everyMs);
    // A node with only watched jobs left still stops when asked.
    this.timer.unref();
  }

  private async check(): Promise<void> {
    let written: number | undefined;
    try {
      const info = await answered(this.engine, "measuring the container's filesystem", (abortSignal) => this.container.inspect({ size: true, abortSignal } as Docker.ContainerInspectOptions));
      written = (info as { SizeRw?: number }).SizeRw;
    } catch (e) {
      if (statusOf(e) === 404) return this.stop();
    }
    if (this.stopped) return;
    if (written !== undefined && written > this.bound) {
      this.stop();
      this.over(overStorage(written, this.bound));
      return;
    }
    this.next();
  }
}
