/**
 * How many jobs a node holds that have not ended, and how much of what they run: each is a job
 * machine and its record in memory until it ends (~16 KB for a small job), with its command and
 * environment (up to a request body's size, 1 MiB). Unbounded, a client submitting jobs that wait
 * for resources took a probed node from 100 to 430 MB with 20,000 of them, and 1,000 jobs of a
 * large environment would hold a gigabyte. Past `jobs.max_unfinished` jobs or
 * `jobs.max_unfinished_bytes` of commands, environments and secrets, a submission is refused
 * (503, retry once some end); jobs already held, picked up after a restart or placed here by
 * another node (whose reservations bound them) count but are never refused here.
 */
import type { Job, JobSpec } from '../../behaviors/jobs/schema.js';
import { formatBytes } from '../../runtime/bytes.js';
import { DmsError } from '../../runtime/errors.js';

export interface UnfinishedLimits {
  jobs: number;
  bytes: number;
}

/** `jobs.max_unfinished` and `jobs.max_unfinished_bytes` as shipped, for orchestrators built without a config. */
export const DEFAULT_UNFINISHED: UnfinishedLimits = { jobs: 10_000, bytes: 256 * 1024 * 1024 };

type Runs = Pick<JobSpec, 'command' | 'environment'> & { secrets?: Record<string, string> };

/** The bytes of what a job runs: its command, environment and secrets, as UTF-8. */
export function runBytes(job: Runs, secrets: Record<string, string> = job.secrets ?? {}): number {
  let n = 0;
  for (const arg of job.command ?? []) n += Buffer.byteLength(arg);
  for (const map of [job.environment ?? {}, secrets]) for (const [name, value] of Object.entries(map)) n += Buffer.byteLength(name) + Buffer.byteLength(value);
  return n;
}

export class UnfinishedJobs {
  private readonly sizes = new Map<string, number>();
  private bytes = 0;
  /** Submissions checked and not yet held (being stored). */
  private admitting = { jobs: 0, bytes: 0 };

  constructor(private readonly limits: UnfinishedLimits = DEFAULT_UNFINISHED) {}

  /** Stores a submission through `store` if there is room for it, which it holds until it is held itself (`held`); refused (overloaded, 503) otherwise. */
  async admit<T>(spec: Runs, store: () => Promise<T>): Promise<T> {
    const size = runBytes(spec);
    const jobs = this.sizes.size + this.admitting.jobs;
    if (jobs >= this.limits.jobs) {
      throw new DmsError('overloaded', `this node holds ${jobs} jobs that have not ended, its bound (jobs.max_unfinished); submit again once some end`);
    }
    const bytes = this.bytes + this.admitting.bytes;
    if (bytes + size > this.limits.bytes) {
      throw new DmsError(
        'overloaded',
        `the jobs this node holds that have not ended run ${formatBytes(bytes)} of commands, environments and secrets; this one's ${formatBytes(size)} more would pass ${formatBytes(this.limits.bytes)} (jobs.max_unfinished_bytes); submit again once some end`,
      );
    }
    this.admitting = { jobs: this.admitting.jobs + 1, bytes: this.admitting.bytes + size };
    try {
      return await store();
    } finally {
      this.admitting = { jobs: this.admitting.jobs - 1, bytes: this.admitting.bytes - size };
    }
  }

  /** A job the node now follows until it ends, whatever brought it. */
  held(job: Job, secrets?: Record<string, string>): void {
    this.ended(job.id);
    const size = runBytes(job, secrets);
    this.sizes.set(job.id, size);
    this.bytes += size;
  }

  ended(jobId: string): void {
    const size = this.sizes.get(jobId);
    if (size === undefined) return;
    this.sizes.delete(jobId);
    this.bytes -= size;
  }
}
