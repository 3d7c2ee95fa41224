/**
 * The executor protocol: what an orchestrator asks of an executor actor, and what an executor
 * tells the orchestrator about runs. Every executor (docker, null, one a plugin brings) is an
 * actor at inbox `executor/<name>` answering these behaviors; the orchestrator knows executors
 * only by these envelopes. Each payload is declared once here: the schema validates what
 * arrives and gives both sides their types. Watches, clean-ups and reports of one moment
 * travel together, many runs to an envelope.
 *
 *   orchestrator ──/dms/executor/start──▶ executor      (no reply: how each start went comes as ↓)
 *   orchestrator ◀──/dms/job/started───── executor      (runs that run now, with their handles, or why not)
 *   orchestrator ──/dms/executor/watch──▶ executor      (no reply: the ends come as ↓)
 *   orchestrator ◀──/dms/job/exited────── executor      (runs ended, or can no longer be followed)
 *   orchestrator ◀──/dms/job/progress──── executor      (a step of fetching what the job needs)
 */
import { z } from 'zod';
import { LogChunkSchema, LogIdSchema } from './jobs.js';
import { JobSchema } from './schema.js';

/** Executor actors' inboxes: `executor/<name>`, the name jobs give as their `executor`. */
const EXECUTOR_INBOX_PREFIX = 'executor/';
export const executorInbox = (name: string): string => `${EXECUTOR_INBOX_PREFIX}${name}`;

export const ExecutorBehaviors = {
  /** Start jobs; each one's handle, once it runs (a pull may come first), or why it could not, is reported with /dms/job/started. */
  start: '/dms/executor/start',
  /** Report, with /dms/job/exited, when the runs end (at once for one that has ended). */
  watch: '/dms/executor/watch',
  /** Stop a run; answers once it is stopped and its container gone. */
  cancel: '/dms/executor/cancel',
  /** Release what ended runs hold (their containers); their output is kept. */
  cleanup: '/dms/executor/cleanup',
  /** A page of a run's stored output. */
  readLogs: '/dms/executor/logs/read',
  /** Answers once output extends past a byte offset, the run's output is complete, or a wait runs out. */
  waitForLogs: '/dms/executor/logs/wait',
  /** Start-up recovery: the runs a previous process of this node left. */
  reconcile: '/dms/executor/reconcile',
} as const;

/** What executors tell the orchestrator about its runs. */
export const JobNotifications = {
  started: '/dms/job/started',
  exited: '/dms/job/exited',
  progress: '/dms/job/progress',
} as const;

/**
 * The capability the reports need, instead of their names: under /dms/executor, so that only
 * who may speak the executor protocol (the node's own actors, an admin) can tell the
 * orchestrator a run ended, never a holder of /dms/job.
 */
export const REPORT_CAPABILITY = '/dms/executor/report';

const jobId = z.string().min(1).max(100);

/** A run, as plain data: stored with the job and rebuilt after a restart. */
export const ExecutionHandleSchema = z.object({
  /** Name of the executor that owns the run. */
  executor: z.string().min(1).max(64),
  job_id: jobId,
  /** The executor's own id for the run (a container id for docker); stored as job.container_id. */
  id: z.string().min(1).max(200),
});

export const ExitResultSchema = z.object({
  exit_code: z.int(),
  oom_killed: z.boolean(),
  /** Why the run failed beyond its exit code: cancelled, out of memory. */
  error: z.string().optional(),
});

/** Most runs one watch, clean-up or report carries: those of one moment travel together. */
export const MAX_RUNS_PER_ENVELOPE = 1000;
const runs = z.strictObject({ handles: z.array(ExecutionHandleSchema).min(1).max(MAX_RUNS_PER_ENVELOPE) });

export const StartPayload = z.strictObject({ jobs: z.array(JobSchema).min(1).max(MAX_RUNS_PER_ENVELOPE) });

export const WatchPayload = runs;

export const CancelRunPayload = z.strictObject({ handle: ExecutionHandleSchema, reason: z.string().min(1).max(600) });
/** The run's result, when the executor could still learn it. */
export const CancelRunReply = z.object({
  result: ExitResultSchema.optional(),
  /** No result: why the run could no longer be followed (e.g. a provider that ignored the cancel). */
  lost: z.string().max(1000).optional(),
});
export type CancelRunReply = z.output<typeof CancelRunReply>;

export const CleanupPayload = runs;

export const ReadLogsPayload = z.strictObject({
  handle: ExecutionHandleSchema,
  from: z.int().nonnegative(),
  limit: z.int().min(1).max(8 * 1024 * 1024),
  /** The output of the job's run before its current one (placed again); not_found when none is kept. */
  previous: z.boolean().default(false),
  /** The `log` of the page whose `next` is `from` (LogPageSchema.log). */
  log: LogIdSchema.optional(),
});
export const LogPageSchema = z.object({
  chunks: z.array(LogChunkSchema),
  /** Where the next page starts. */
  next: z.int().nonnegative(),
  /** Bytes stored so far: `next < size` means there is more to read now. */
  size: z.int().nonnegative(),
  /**
   * Which stored log `next` is an offset into, null while the run has written none: a run of the
   * job placed again writes a new log, and a reader that passes this back with `from` gets the
   * rest of the log it was reading (kept as the previous run's) before the new one from its start.
   */
  log: LogIdSchema.nullable().default(null),
  /** More follows at once whatever `size` says: this page was the rest of a log since replaced. */
  ahead: z.boolean().default(false),
});

export const WaitForLogsPayload = z.strictObject({
  handle: ExecutionHandleSchema,
  from: z.int().nonnegative(),
  /** Longest the answer may wait. */
  wait_ms: z.int().min(0).max(60_000),
});
export const WaitForLogsReply = z.object({ found: z.boolean() });

export const ReconcilePayload = z.strictObject({ job_ids: z.array(jobId).max(1_000_000) });
export const ReconcileReplySchema = z.object({
  reattached: z.array(z.object({ handle: ExecutionHandleSchema, state: z.enum(['running', 'exited']) })),
  missing: z.array(z.object({ job_id: z.string(), reason: z.string() })),
  orphans: z.array(ExecutionHandleSchema),
});

/** Characters of a report's text at most (an error, a reason): executor/actor.ts cuts longer ones, since one refused report is every run of its batch left waiting. */
export const MAX_REPORT_TEXT = 2000;

/** A run that runs now (`handle`), or why it could not start (`error`). */
export const StartReportSchema = z.union([
  z.strictObject({ job_id: jobId, handle: ExecutionHandleSchema }),
  z.strictObject({ job_id: jobId, error: z.string().min(1).max(MAX_REPORT_TEXT) }),
]);
export type StartReport = z.output<typeof StartReportSchema>;
export const StartedPayload = z.strictObject({ runs: z.array(StartReportSchema).min(1).max(MAX_RUNS_PER_ENVELOPE) });

/** A run ended (`result`), or it can no longer be followed (`lost`: an executor fault, a vanished container). */
export const RunReportSchema = z.union([
  z.strictObject({ job_id: jobId, handle: ExecutionHandleSchema.optional(), result: ExitResultSchema }),
  z.strictObject({ job_id: jobId, handle: ExecutionHandleSchema.optional(), lost: z.string().min(1).max(MAX_REPORT_TEXT) }),
]);
export type RunReport = z.output<typeof RunReportSchema>;
export const ExitedPayload = z.strictObject({ runs: z.array(RunReportSchema).min(1).max(MAX_RUNS_PER_ENVELOPE) });

/** One step of fetching what a job needs, its image or its inputs (pull progress ticks are left out: they are many and say little). */
export const ProgressPayload = z.strictObject({
  job_id: jobId,
  status: z.string().min(1).max(500),
  id: z.string().max(200).optional(),
  stage: z.enum(['image', 'inputs']).optional(),
});
