/**
 * The contract between the orchestrator and whatever runs a job. An executor owns the
 * processes or containers it starts; the orchestrator owns the job record and decides what a
 * result means for it. Handles are plain data so they can be stored with the job and
 * rebuilt after a restart.
 */
import type { z } from 'zod';
import type {
  ExecutionHandleSchema,
  ExitResultSchema,
  LogPageSchema,
  ReconcileReplySchema,
} from './executor.js';
import type { OutputSpec } from './files.js';
import type { LogChunkSchema } from './jobs.js';
import type { Job } from './schema.js';

export type ExecutionHandle = z.output<typeof ExecutionHandleSchema>;
export type ExitResult = z.output<typeof ExitResultSchema>;

/** A piece of output: its stream, its text, and when it was produced (RFC 3339). */
export type LogChunk = z.output<typeof LogChunkSchema>;

/**
 * A page of stored output, addressed by byte offsets into the job's log, as an executor answers
 * it: `log` and `ahead` may be left out (a plugin's executor that keeps no log ids).
 */
export type LogPage = z.input<typeof LogPageSchema>;

export interface PullProgress {
  status: string;
  /** What the step is about: the job's image (the default), or its inputs being fetched. */
  stage?: 'image' | 'inputs';
  /** Layer id, when the event is about one layer. */
  id?: string;
  current?: number;
  total?: number;
}

export interface StartOptions {
  /** Called while an executor fetches what the job needs (e.g. a missing image). */
  onProgress?: (event: PullProgress) => void;
}

/**
 * What start-up recovery found: runs tracked anew (`reattached`; their result may already be
 * there), known jobs whose run is gone (`missing`, with the reason to fail them with), and runs
 * of this node for jobs nobody asked about (`orphans`, left alone; cleanup() removes one).
 */
export type ReconcileReport = z.output<typeof ReconcileReplySchema>;

/**
 * An output's files as an executor hands them back once the run has ended: the node imports
 * them, checks them as a stranger's (links leaving the root, size), and signs them in the
 * job's manifest, whatever ran the job.
 */
export type OutputContent =
  /**
   * A tar of the output: a directory's entries, or one file. `strip` leading path components
   * are dropped first, as from Docker's archive of `/outputs`, which names its entries
   * `outputs/…` (a single file left at the root is the output itself).
   */
  | { tar: AsyncIterable<Uint8Array>; strip?: number }
  /** A file or directory on this machine, read where it is. */
  | { path: string };

export interface Executor {
  readonly name: string;
  /**
   * The files of one declared output of an ended run (`output.path` is the job's own path).
   * Rejects with not_found when the run left nothing there; the output then carries that error
   * in the manifest. An executor without it cannot run a job that declares outputs: such a job
   * fails at its start, saying so, rather than end with an empty manifest.
   */
  readOutput?(handle: ExecutionHandle, output: OutputSpec): Promise<OutputContent>;
  /**
   * True when the implementation gets outputs to the manifest itself before it reports the end
   * (Docker, which collects a container that ended while the node was down from its labels; the
   * remote follower, which fetches the manifest the provider signed).
   */
  readonly collectsOutputs?: boolean;
  /** Starts the job; resolves once it runs. Output is captured from the first byte. */
  start(job: Job, opts?: StartOptions): Promise<ExecutionHandle>;
  /** Resolves when the run has ended and its output is fully captured. */
  wait(handle: ExecutionHandle): Promise<ExitResult>;
  /**
   * Whole chunks from byte `from` on, reading about `limit` bytes: a page, never the whole log.
   * With `log` (a page's `log`, `from` an offset into it): when the run has been replaced since,
   * the rest of that log first, if it is the one kept as the previous run's, then the new run's.
   */
  readLogs(handle: ExecutionHandle, from: number, limit: number, log?: string): Promise<LogPage>;
  /**
   * The same page of the output of the job's run before its current one (a job placed again:
   * its node lost, or the same node back), null when none is kept. An executor without it keeps
   * no earlier run's output.
   */
  readPreviousLogs?(handle: ExecutionHandle, from: number, limit: number): Promise<LogPage | null>;
  /** True once output extends past byte `from`; false when no more is coming or `signal` aborts. */
  waitForLogs(handle: ExecutionHandle, from: number, signal: AbortSignal): Promise<boolean>;
  /** Stops the run; wait() then resolves with `error` naming `reason`. */
  cancel(handle: ExecutionHandle, reason: string): Promise<void>;
  /** Releases what the run holds (e.g. removes the container). Logs are kept. */
  cleanup(handle: ExecutionHandle): Promise<void>;
  /** Start-up recovery: finds runs a previous process of this node left for `knownJobIds`. */
  reconcile(knownJobIds: readonly string[]): Promise<ReconcileReport>;
}

/** An implementation with a life of its own (e.g. an engine subscription): opened and closed with its actor. */
export interface ExecutorImplementation extends Executor {
  open?(): Promise<void> | void;
  close?(): Promise<void> | void;
}

/** What a result means for the job: the status to record and the error to show. */
export function outcome(result: ExitResult): { status: 'completed' | 'failed'; error: string | null } {
  if (result.error) return { status: 'failed', error: result.error };
  if (result.oom_killed) return { status: 'failed', error: 'killed: out of memory' };
  if (result.exit_code !== 0) return { status: 'failed', error: `exited with code ${result.exit_code}` };
  return { status: 'completed', error: null };
}
