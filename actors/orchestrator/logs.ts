/**
 * Where a job's output is read from: its executor and the handle of its run. Reads are by byte
 * offset (/dms/executor/logs/read), so a follower coming back for more reads only what is new.
 */
import type { ExecutionHandle } from '../../behaviors/jobs/execution.js';
import type { ExecutorClient } from './executors.js';

export interface LogSource {
  executor: ExecutorClient;
  handle: ExecutionHandle;
}

/** Resolves when `signal` aborts: the part of a wait that ends it at its deadline. */
export function aborted(signal: AbortSignal): Promise<void> {
  if (signal.aborted) return Promise.resolve();
  return new Promise((resolve) => signal.addEventListener('abort', () => resolve(), { once: true }));
}
