/**
 * The contract between the orchestrator and whatever runs a job. An executor owns the
 * processes or containers it starts; the orchestrator owns the job record and decides what a
 * result means for it. Handles are plain data so they can be stored with the job and
 * rebuilt after a restart.
 */
import type { Job } from '../../behaviors/jobs/schema.js';

export interface ExecutionHandle {
  /** Name of the executor that owns the run (its registry key). */
  executor: string;
  job_id: string;
  /** The executor's own id for the run (a container id for docker); stored as job.container_id. */
  id: string;
}

export interface ExitResult {
  exit_code: number;
  oom_killed: boolean;
  /** Why the run failed beyond its exit code: cancelled, out of memory. */
  error?: string;
}

export type ExecutionState =
  | { state: 'created' | 'running' }
  | { state: 'exited'; result: ExitResult }
  /** The executor has no trace of the run (removed, or lost in a restart). */
  | { state: 'missing' };

export interface LogChunk {
  stream: 'stdout' | 'stderr';
  data: string;
  /** When the output was produced (RFC 3339). */
  at: string;
}

/** A page of stored output, addressed by byte offsets into the job's log. */
export interface LogPage {
  chunks: LogChunk[];
  /** Where the next page starts. */
  next: number;
  /** Bytes stored so far: `next < size` means there is more to read now. */
  size: number;
}

export interface LogOptions {
  /** Keep yielding until the run ends, instead of stopping at the output so far. */
  follow?: boolean;
  /** Stops a following reader early (e.g. the HTTP client went away). */
  signal?: AbortSignal;
}

export interface PullProgress {
  status: string;
  /** Layer id, when the event is about one layer. */
  id?: string;
  current?: number;
  total?: number;
}

export interface StartOptions {
  /** Called while an executor fetches what the job needs (e.g. a missing image). */
  onProgress?: (event: PullProgress) => void;
}

export interface ReconcileReport {
  /** Runs found again and tracked anew; call wait() for the result, which may already be there. */
  reattached: { handle: ExecutionHandle; state: 'running' | 'exited' }[];
  /** Known jobs whose run is gone: the orchestrator should fail them with `reason`. */
  missing: { job_id: string; reason: string }[];
  /** Runs of this node for jobs nobody asked about, left alone; cleanup() removes one. */
  orphans: ExecutionHandle[];
}

export interface Executor {
  readonly name: string;
  /** Starts the job; resolves once it runs. Output is captured from the first byte. */
  start(job: Job, opts?: StartOptions): Promise<ExecutionHandle>;
  /** Resolves when the run has ended and its output is fully captured. */
  wait(handle: ExecutionHandle): Promise<ExitResult>;
  status(handle: ExecutionHandle): Promise<ExecutionState>;
  /** Output so far; with `follow`, keeps yielding until the run ends. */
  logs(handle: ExecutionHandle, opts?: LogOptions): AsyncIterable<LogChunk>;
  /** Whole chunks from byte `from` on, reading about `limit` bytes: a page, never the whole log. */
  readLogs(handle: ExecutionHandle, from: number, limit: number): Promise<LogPage>;
  /** True once output extends past byte `from`; false when no more is coming or `signal` aborts. */
  waitForLogs(handle: ExecutionHandle, from: number, signal: AbortSignal): Promise<boolean>;
  /** Stops the run; wait() then resolves with `error` naming `reason`. */
  cancel(handle: ExecutionHandle, reason: string): Promise<void>;
  /** Releases what the run holds (e.g. removes the container). Logs are kept. */
  cleanup(handle: ExecutionHandle): Promise<void>;
  /** Start-up recovery: finds runs a previous process of this node left for `knownJobIds`. */
  reconcile(knownJobIds: readonly string[]): Promise<ReconcileReport>;
}

/** What a result means for the job: the status to record and the error to show. */
export function outcome(result: ExitResult): { status: 'completed' | 'failed'; error: string | null } {
  if (result.error) return { status: 'failed', error: result.error };
  if (result.oom_killed) return { status: 'failed', error: 'killed: out of memory' };
  if (result.exit_code !== 0) return { status: 'failed', error: `exited with code ${result.exit_code}` };
  return { status: 'completed', error: null };
}
