/**
 * Local placement: asks the resource manager to reserve resources for the jobs that wait,
 * oldest first, and starts those it grants. A job that does not fit stays waiting with the
 * manager's reason; a smaller job behind it may still start (no head-of-line blocking, at the
 * price of a large job possibly waiting while small ones keep fitting).
 *
 * Passes are coalesced: at most one reservation request is in flight, and any number of
 * pokes meanwhile make one more pass. A refused job is asked about again only after
 * resources were freed since its refusal: until then the answer cannot change. And only if it
 * fits what the manager last said is free, less what the jobs before it in the same pass ask:
 * when one job's end frees one job's room, one waiting job is asked, not every waiting job
 * (each asked and refused again cost a reservation entry and a machine event, and a node with
 * a thousand jobs queued behind a full share spent its CPU on that). A job refused again for
 * the same reason is not told again: its machine has nothing new to do.
 */
import { setImmediate as nextTurn } from 'node:timers/promises';
import type { Freed, ReserveReply } from '../../behaviors/jobs/resources.js';
import type { ResourceSpec } from '../../behaviors/jobs/schema.js';
import { errorText } from '../../runtime/errors.js';
import type { Logger } from '../../runtime/log.js';
import { ResourceLedger } from '../resources/ledger.js';
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
  private readonly waiting = new Map<string, { run: JobRun; refusedIn: number; reason?: string }>();
  /** Bumped whenever resources are freed: refusals from an older epoch may no longer hold. */
  private epoch = 0;
  /** What the manager last said is free (null: not known, so every refused job is asked again), and at which ledger version. */
  private free: ResourceSpec | null = null;
  /** The whole share the manager last spoke of, nothing held (null: not known, or it may have grown since). */
  private share: ResourceLedger | null = null;
  private freeVersion = -1;
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

  /**
   * Resources were freed: waiting jobs get asked about again, those that fit `now.free` when
   * the manager said what is free; every one when it did not (`version` alone).
   */
  freed(now: Freed): void {
    this.epoch++;
    this.learn('free' in now ? now : null, now.version);
    this.poke();
  }

  /**
   * Why a job could never be reserved here: it asks more than the whole share the manager last
   * spoke of. Null when it may fit, or when the share is not known.
   */
  beyondShare(resources: ResourceSpec): string | null {
    return this.share?.shortfall(resources) ?? null;
  }

  /** The manager's word on what is free and what is offered; one read at an older ledger version than the last is stale and ignored. */
  private learn(now: { free: ResourceSpec; offering: ResourceSpec } | null, version: number | undefined): void {
    if (version !== undefined && version < this.freeVersion) return;
    this.free = now?.free ?? null;
    // Asked of every job routed (beyondShare), told once per reply: the ledger is made here.
    this.share = now ? new ResourceLedger(now.offering) : null;
    if (version !== undefined) this.freeVersion = version;
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
      // What is left of the known free room once the refused jobs picked so far are counted.
      const room = this.free ? new ResourceLedger(this.free) : null;
      for (const { run, refusedIn } of this.waiting.values()) {
        if (refusedIn >= epoch) continue;
        // A job never asked is asked: its refusal is what tells its machine (and its caller) why it waits.
        if (refusedIn >= 0 && room) {
          if (!room.fits(run.job.resources)) continue;
          room.reserve(run.id, run.job.resources, true);
        }
        candidates.push(run);
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
      this.learn(reply, reply.version);
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
        if (waiting.reason === reason) continue;
        waiting.reason = reason;
        this.hooks.refused(waiting.run, reason);
      }
      if (candidates.length === MAX_PER_PASS) this.again = true;
    } while (this.again && !this.halted);
  }
}
