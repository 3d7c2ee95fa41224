/**
 * Where a job's output is read from: its executor and the handle of its run. Reads are by byte
 * offset (Executor.readLogs), so a follower coming back for more reads only what is new.
 */
import type { ExecutionHandle, Executor } from '../executors/types.js';

export interface LogSource {
  executor: Executor;
  handle: ExecutionHandle;
}

/** Resolves when `signal` aborts: the part of a wait that ends it at its deadline. */
export function aborted(signal: AbortSignal): Promise<void> {
  if (signal.aborted) return Promise.resolve();
  return new Promise((resolve) => signal.addEventListener('abort', () => resolve(), { once: true }));
}
