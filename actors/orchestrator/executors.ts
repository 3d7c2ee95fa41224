/**
 * The executors as the orchestrator sees them: actors of this node at `executor/<name>`, asked
 * by envelopes only (behaviors/jobs/executor.ts), unsigned since they never leave the node.
 * Requests that wait for an answer are invoked; the rest are told, those of one moment together,
 * and what comes of them (a run's start, its end) comes back as a /dms/job/… envelope.
 */
import {
  CancelRunReply,
  ExecutorBehaviors,
  executorInbox,
  LogPageSchema,
  MAX_RUNS_PER_ENVELOPE,
  ReconcileReplySchema,
  WaitForLogsReply,
} from '../../behaviors/jobs/executor.js';
import type { Job } from '../../behaviors/jobs/schema.js';
import type { Actor } from '../../runtime/actor.js';
import type { Handle } from '../../runtime/wire/envelope.js';
import type { ExecutionHandle, ReconcileReport } from '../../behaviors/jobs/execution.js';
import { Batcher } from '../../runtime/batcher.js';
import type { z } from 'zod';

/** How long a stop may take: the engine's grace period, the container's exit and its removal. */
const STOP_TTL_MS = 3600_000;
/** Added to a wait for output, for the answer's trip back. */
const REPLY_MARGIN_MS = 5_000;

export class ExecutorClient {
  private readonly to: Handle;
  /** Starts, watches and clean-ups of one moment travel together. */
  private readonly starts: Batcher<Job>;
  private readonly watches: Batcher<ExecutionHandle>;
  private readonly cleanups: Batcher<ExecutionHandle>;

  constructor(
    private readonly actor: Actor,
    readonly name: string,
  ) {
    this.to = actor.local(executorInbox(name));
    this.starts = new Batcher((jobs) => actor.tell(this.to, ExecutorBehaviors.start, { jobs }), MAX_RUNS_PER_ENVELOPE);
    this.watches = new Batcher((handles) => actor.tell(this.to, ExecutorBehaviors.watch, { handles }), MAX_RUNS_PER_ENVELOPE);
    this.cleanups = new Batcher((handles) => actor.tell(this.to, ExecutorBehaviors.cleanup, { handles }), MAX_RUNS_PER_ENVELOPE);
  }

  /** Asks for the job to be started; how it went is reported with /dms/job/started. Resolves once the request is on its way. */
  start(job: Job): Promise<void> {
    return this.starts.add(job);
  }

  /** Asks for the run's end to be reported with /dms/job/exited; resolves once the request is on its way. */
  watch(handle: ExecutionHandle): Promise<void> {
    return this.watches.add(handle);
  }

  /** Resolves once the run is stopped and gone, with its result if the executor still knew it, else why it lost the run. */
  cancel(handle: ExecutionHandle, reason: string): Promise<CancelRunReply> {
    return this.actor.call(this.to, ExecutorBehaviors.cancel, { handle, reason }, CancelRunReply, { ttlMs: STOP_TTL_MS });
  }

  cleanup(handle: ExecutionHandle): Promise<void> {
    return this.cleanups.add(handle);
  }

  /**
   * A page of the run's output (`log`: the page's whose `next` is `from`, Executor.readLogs);
   * `previous`: of the run before it, rejected not_found when none is kept.
   */
  readLogs(handle: ExecutionHandle, from: number, limit: number, opts: { previous?: boolean; log?: string } = {}): Promise<z.output<typeof LogPageSchema>> {
    const { previous, log } = opts;
    return this.actor.call(this.to, ExecutorBehaviors.readLogs, { handle, from, limit, ...(previous ? { previous } : {}), ...(log !== undefined ? { log } : {}) }, LogPageSchema);
  }

  /** True once output extends past byte `from`; false when no more is coming or `waitMs` ran out. */
  async waitForLogs(handle: ExecutionHandle, from: number, waitMs: number): Promise<boolean> {
    const wait_ms = Math.max(0, Math.ceil(waitMs));
    const reply = await this.actor.call(this.to, ExecutorBehaviors.waitForLogs, { handle, from, wait_ms }, WaitForLogsReply, {
      ttlMs: wait_ms + REPLY_MARGIN_MS,
    });
    return reply.found;
  }

  reconcile(jobIds: readonly string[]): Promise<ReconcileReport> {
    return this.actor.call(this.to, ExecutorBehaviors.reconcile, { job_ids: jobIds }, ReconcileReplySchema, { ttlMs: STOP_TTL_MS });
  }
}
