/**
 * Local placement: asks the resource manager to reserve resources for the jobs that wait,
 * oldest first, and starts those it grants. A job that does not fit stays waiting with the
 * manager's reason; a smaller job behind it may still start (no head-of-line blocking, at the
 * price of a large job possibly waiting while small ones keep fitting).
 *
 * Passes are coalesced: at most one reservation request is in flight, and any number of
 * pokes meanwhile make one more pass. A refused job is asked about again only after
 * resources were freed since its refusal: until then the answer cannot change.
 */
import { setImmediate as nextTurn } from 'node:timers/promises';
import type { ReserveReply } from '../../behaviors/jobs/resources.js';
import type { ResourceSpec } from '../../behaviors/jobs/schema.js';
import { errorText } from '../../runtime/errors.js';
import type { Logger } from '../../runtime/log.js';
import type { JobRun } from './run.js';

/** Most jobs one reservation request carries. */
const MAX_PER_PASS = 256;

export interface SchedulerHooks {
  reserve(jobs: { job_id: string; resources: ResourceSpec }[]): Promise<ReserveReply>;
  /** Resources reserved: start the job. */
  granted(run: JobRun): void;
  /** Resources reserved for a job that stopped waiting meanwhile (cancelled): give them back. */
  unwanted(jobId: string): void;
  refused(run: JobRun, reason: string): void;
}

export class Scheduler {
  /**
   * Waiting jobs in submission order (a Map keeps insertion order), each with the epoch it was
   * last refused in (-1: not yet asked).
   */
  private readonly waiting = new Map<string, { run: JobRun; refusedIn: number }>();
  /** Bumped whenever resources are freed: refusals from an older epoch may no longer hold. */
  private epoch = 0;
  private passing = false;
  private again = false;
  /** Until resume(): after a restart, jobs still running must hold their share before others get any. */
  private halted = true;

  constructor(
    private readonly hooks: SchedulerHooks,
    private readonly log: Logger,
  ) {}

  get size(): number {
    return this.waiting.size;
  }

  /** Asked afresh: a refusal from before it left the queue says nothing now. */
  add(run: JobRun): void {
    this.waiting.delete(run.id);
    this.waiting.set(run.id, { run, refusedIn: -1 });
    this.poke();
  }

  remove(jobId: string): void {
    this.waiting.delete(jobId);
  }

  /** Resources were freed: every waiting job gets asked about again. */
  freed(): void {
    this.epoch++;
    this.poke();
  }

  /** Starts placing jobs (the node finished recovering). */
  resume(): void {
    this.halted = false;
    this.poke();
  }

  halt(): void {
    this.halted = true;
  }

  poke(): void {
    if (this.halted) return;
    if (this.passing) {
      this.again = true;
      return;
    }
    this.passing = true;
    // One turn of the event loop first: the jobs of one group commit are admitted one
    // microtask after another, and then travel in one reservation request.
    void nextTurn()
      .then(() => this.passes())
      .finally(() => (this.passing = false));
  }

  private async passes(): Promise<void> {
    do {
      this.again = false;
      const epoch = this.epoch;
      const candidates: JobRun[] = [];
      for (const { run, refusedIn } of this.waiting.values()) {
        if (refusedIn < epoch) candidates.push(run);
        if (candidates.length === MAX_PER_PASS) break;
      }
      if (candidates.length === 0 || this.halted) return;
      let reply: ReserveReply;
      try {
        reply = await this.hooks.reserve(candidates.map((r) => ({ job_id: r.id, resources: r.job.resources })));
      } catch (e) {
        // The jobs keep waiting; the next submission, release or wake-up tries again.
        this.log.warn({ err: errorText(e) }, 'resource reservation failed');
        return;
      }
      for (const id of reply.granted) {
        const waiting = this.waiting.get(id);
        if (!waiting) {
          this.hooks.unwanted(id);
          continue;
        }
        this.waiting.delete(id);
        this.hooks.granted(waiting.run);
      }
      for (const { job_id, reason } of reply.refused) {
        const waiting = this.waiting.get(job_id);
        if (!waiting) continue;
        waiting.refusedIn = epoch;
        this.hooks.refused(waiting.run, reason);
      }
      if (candidates.length === MAX_PER_PASS) this.again = true;
    } while (this.again && !this.halted);
  }
}
