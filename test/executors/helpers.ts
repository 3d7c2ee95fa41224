import { randomUUID } from 'node:crypto';
import type { Job, JobSpec, ResourceSpec } from '../../behaviors/jobs/schema.js';
import type { Executor, ExecutionHandle, LogChunk } from '../../actors/executors/types.js';

/** A job record as storage would hand it to an executor. */
/** A spec in its canonical (parsed) form, as executors get it; storage may be left out. */
type TestSpec = Partial<Omit<JobSpec, 'resources'>> & { executor: string; resources?: Omit<ResourceSpec, 'storage'> & Partial<Pick<ResourceSpec, 'storage'>> };

export function jobOf(spec: TestSpec): Job {
  const now = new Date().toISOString();
  return {
    id: randomUUID(),
    name: spec.name ?? 'test',
    image: spec.image ?? 'dms-test/busybox:latest',
    command: spec.command ?? [],
    environment: spec.environment ?? {},
    resources: { storage: { size: 0 }, ...(spec.resources ?? { cpu: { cores: 0.5 }, memory: { size: 64 * 1024 * 1024 } }) },
    executor: spec.executor,
    status: 'pending',
    node: null,
    exit_code: null,
    error: null,
    pending_reason: null,
    timeout_s: null,
    container_id: null,
    created_at: now,
    updated_at: now,
  };
}

export async function collect(executor: Executor, handle: ExecutionHandle, follow = false): Promise<LogChunk[]> {
  const chunks: LogChunk[] = [];
  for await (const chunk of executor.logs(handle, { follow })) chunks.push(chunk);
  return chunks;
}

/**
 * Follows a run's output to its end, noting when each chunk arrived: proof that chunks
 * streamed while the run went on instead of arriving together at the end.
 */
export async function followTimed(
  executor: Executor,
  handle: ExecutionHandle,
): Promise<{ chunks: LogChunk[]; arrivals: number[]; ended: number }> {
  const chunks: LogChunk[] = [];
  const arrivals: number[] = [];
  for await (const chunk of executor.logs(handle, { follow: true })) {
    arrivals.push(Date.now());
    chunks.push(chunk);
  }
  return { chunks, arrivals, ended: Date.now() };
}

export const text = (chunks: LogChunk[], stream: LogChunk['stream']): string =>
  chunks
    .filter((c) => c.stream === stream)
    .map((c) => c.data)
    .join('');
