import { randomUUID } from 'node:crypto';
import type { Job, JobSpecInput } from '../../behaviors/jobs/schema.js';
import type { Executor, ExecutionHandle, LogChunk } from '../../actors/executors/types.js';

/** A job record as storage would hand it to an executor. */
export function jobOf(spec: Partial<JobSpecInput> & { executor: string }): Job {
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

export const text = (chunks: LogChunk[], stream: LogChunk['stream']): string =>
  chunks
    .filter((c) => c.stream === stream)
    .map((c) => c.data)
    .join('');
