/**
 * The executors as the orchestrator sees them: actors of this node at `executor/<name>`, asked
 * by envelopes only (behaviors/jobs/executor.ts), unsigned since they never leave the node.
 * Requests that wait for an answer are invoked; the rest are told, and what comes of them
 * (a run's end) comes back as a /dms/job/… envelope.
 */
import {
  CancelRunReply,
  ExecutorBehaviors,
  executorInbox,
  LogPageSchema,
  ReconcileReplySchema,
  StartReply,
  WaitForLogsReply,
} from '../../behaviors/jobs/executor.js';
import { callBehavior, localHandle, tell } from '../../behaviors/jobs/replies.js';
import type { Job } from '../../behaviors/jobs/schema.js';
import type { Actor } from '../../runtime/actor.js';
import type { Handle } from '../../runtime/wire/envelope.js';
import type { ExecutionHandle, ExitResult, LogPage, ReconcileReport } from '../executors/types.js';

/** How long a start may take, pulling its image included; then the job fails with a timeout. */
const START_TTL_MS = 24 * 3600_000;
/** How long a stop may take: the engine's grace period, the container's exit and its removal. */
const STOP_TTL_MS = 3600_000;
/** Added to a wait for output, for the answer's trip back. */
const REPLY_MARGIN_MS = 5_000;

export class ExecutorClient {
  private readonly to: Handle;

  constructor(
    private readonly actor: Actor,
    readonly name: string,
  ) {
    this.to = localHandle(actor, executorInbox(name));
  }

  /** Resolves with the run's handle once it runs. */
  async start(job: Job): Promise<ExecutionHandle> {
    return (await callBehavior(this.actor, this.to, ExecutorBehaviors.start, { job }, StartReply, { ttlMs: START_TTL_MS })).handle;
  }

  /** Asks for the run's end to be reported with /dms/job/exited. */
  watch(handle: ExecutionHandle): Promise<void> {
    return tell(this.actor, this.to, ExecutorBehaviors.watch, { handle });
  }

  /** Resolves once the run is stopped and gone, with its result if the executor still knew it. */
  async cancel(handle: ExecutionHandle, reason: string): Promise<ExitResult | undefined> {
    return (await callBehavior(this.actor, this.to, ExecutorBehaviors.cancel, { handle, reason }, CancelRunReply, { ttlMs: STOP_TTL_MS })).result;
  }

  cleanup(handle: ExecutionHandle): Promise<void> {
    return tell(this.actor, this.to, ExecutorBehaviors.cleanup, { handle });
  }

  readLogs(handle: ExecutionHandle, from: number, limit: number): Promise<LogPage> {
    return callBehavior(this.actor, this.to, ExecutorBehaviors.readLogs, { handle, from, limit }, LogPageSchema);
  }

  /** True once output extends past byte `from`; false when no more is coming or `waitMs` ran out. */
  async waitForLogs(handle: ExecutionHandle, from: number, waitMs: number): Promise<boolean> {
    const wait_ms = Math.max(0, Math.ceil(waitMs));
    const reply = await callBehavior(this.actor, this.to, ExecutorBehaviors.waitForLogs, { handle, from, wait_ms }, WaitForLogsReply, {
      ttlMs: wait_ms + REPLY_MARGIN_MS,
    });
    return reply.found;
  }

  reconcile(jobIds: readonly string[]): Promise<ReconcileReport> {
    return callBehavior(this.actor, this.to, ExecutorBehaviors.reconcile, { job_ids: jobIds }, ReconcileReplySchema, { ttlMs: STOP_TTL_MS });
  }
}
