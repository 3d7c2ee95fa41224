/**
 * Reading a job's output by position, for callers that come back for more (a follower over
 * REST polls with the count of chunks it already has). Executors store output as a sequence
 * of chunks; the position is an index into that sequence.
 */
import type { ExecutionHandle, Executor, LogChunk } from '../executors/types.js';

export interface LogSource {
  executor: Executor;
  handle: ExecutionHandle;
}

/** The chunks after the first `from` (the store has no index, so it is read from the start). */
export async function chunksAfter(source: LogSource, from: number): Promise<LogChunk[]> {
  const chunks: LogChunk[] = [];
  let seen = 0;
  for await (const chunk of source.executor.logs(source.handle)) {
    if (seen++ >= from) chunks.push(chunk);
  }
  return chunks;
}

/**
 * Resolves true once the run has written more than `from` chunks, false if its output ends
 * (or has no live writer) first, or when `signal` aborts.
 */
export async function outputBeyond(source: LogSource, from: number, signal: AbortSignal): Promise<boolean> {
  let seen = 0;
  for await (const _chunk of source.executor.logs(source.handle, { follow: true, signal })) {
    if (++seen > from) return true;
  }
  return false;
}

/** Resolves when `signal` aborts: the part of a wait that ends it at its deadline. */
export function aborted(signal: AbortSignal): Promise<void> {
  if (signal.aborted) return Promise.resolve();
  return new Promise((resolve) => signal.addEventListener('abort', () => resolve(), { once: true }));
}
