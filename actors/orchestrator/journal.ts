/**
 * Group commit for job writes. With synchronous=FULL every SQLite commit costs an fsync, and
 * one transaction per submission or transition caps the node at a few hundred writes a
 * second. The journal instead commits whatever writes are waiting in one transaction: while
 * a commit is in flight, new writes queue, and the next commit takes them all. Durability is
 * unchanged: each write's promise resolves only after the transaction holding it committed,
 * and nothing is acknowledged before its promise resolves. Writes to one job commit in the
 * order they were made, so its events never come out of order.
 */
import { setImmediate as nextTurn } from 'node:timers/promises';
import type { Job, JobSpecInput } from '../../behaviors/jobs/schema.js';
import type { JobChange, JobCreateOptions, JobRepository, JobWrite } from '../../storage/index.js';

/** Most writes one transaction takes; more wait for the next, so no commit holds the lock for long. */
const MAX_BATCH = 512;

interface Queued {
  write: JobWrite;
  resolve(job: Job): void;
  reject(error: unknown): void;
}

export interface JournalStats {
  writes: number;
  commits: number;
}

export class JobJournal {
  private queue: Queued[] = [];
  private flushing: Promise<void> | null = null;
  private readonly counts: JournalStats = { writes: 0, commits: 0 };

  constructor(private readonly jobs: Pick<JobRepository, 'commitAll'>) {}

  /** Stores a new pending job; resolves with it once committed. */
  create(spec: JobSpecInput, opts?: JobCreateOptions): Promise<Job> {
    return this.enqueue(opts ? { op: 'create', spec, opts } : { op: 'create', spec });
  }

  /** Applies a change (see JobRepository.update); resolves with the job once committed. */
  change(id: string, change: JobChange): Promise<Job> {
    return this.enqueue({ op: 'update', id, change });
  }

  /** Writes and transactions so far: how well commits are shared. */
  get stats(): JournalStats {
    return { ...this.counts };
  }

  /** Resolves once every write made so far is committed (or failed). */
  async drain(): Promise<void> {
    while (this.flushing) await this.flushing;
  }

  private enqueue(write: JobWrite): Promise<Job> {
    return new Promise<Job>((resolve, reject) => {
      this.queue.push({ write, resolve, reject });
      this.flushing ??= this.flush();
    });
  }

  private async flush(): Promise<void> {
    // One turn of the event loop lets the requests that arrived together join the first batch.
    await nextTurn();
    while (this.queue.length > 0) {
      const batch = this.queue.splice(0, MAX_BATCH);
      this.counts.writes += batch.length;
      this.counts.commits++;
      try {
        const results = await this.jobs.commitAll(batch.map((q) => q.write));
        results.forEach((r, i) => (r.ok ? batch[i].resolve(r.job) : batch[i].reject(r.error)));
      } catch (e) {
        // The database failed the transaction: none of its writes is stored.
        for (const q of batch) q.reject(e);
      }
    }
    this.flushing = null;
  }
}
