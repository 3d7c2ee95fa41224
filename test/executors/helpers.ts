import { randomUUID } from 'node:crypto';
import type { Job, JobSpec, ResourceSpec } from '../../behaviors/jobs/schema.js';
import type { Executor, ExecutionHandle, LogChunk } from '../../behaviors/jobs/execution.js';

/** A job record as storage would hand it to an executor. */
/** A spec in its canonical (parsed) form, as executors get it; storage may be left out. */
type TestSpec = Partial<Omit<JobSpec, 'resources'>> & { requester?: string | null; executor: string; resources?: Omit<ResourceSpec, 'storage'> & Partial<Pick<ResourceSpec, 'storage'>> };

export function jobOf(spec: TestSpec): Job {
  const now = new Date().toISOString();
  return {
    id: randomUUID(),
    name: spec.name ?? 'test',
    image: spec.image ?? 'dms-test/busybox:latest',
    command: spec.command ?? [],
    environment: spec.environment ?? {},
    secrets: spec.secrets ?? {},
    resources: { storage: { size: 0 }, ...(spec.resources ?? { cpu: { cores: 0.5 }, memory: { size: 64 * 1024 * 1024 } }) },
    executor: spec.executor,
    status: 'pending',
    node: null,
    exit_code: null,
    error: null,
    pending_reason: null,
    timeout_s: null,
    container_id: null,
    placement: null,
    requester: spec.requester ?? null,
    attempts: [],
    outputs: spec.outputs ?? [],
    inputs: spec.inputs ?? [],
    manifest: null,
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
 * Follows a run's output to its end, noting the run's state when the first chunk arrived:
 * `running` there is proof that chunks streamed while the run went on instead of arriving
 * together at the end. `onFirstChunk` runs after that state is read, so a test can let the
 * run go on only once its first output was seen (no race with the clock).
 */
export async function followLive(
  executor: Executor,
  handle: ExecutionHandle,
  onFirstChunk: () => Promise<void> | void = () => {},
): Promise<{ chunks: LogChunk[]; stateAtFirstChunk: string | undefined }> {
  const chunks: LogChunk[] = [];
  let stateAtFirstChunk: string | undefined;
  for await (const chunk of executor.logs(handle, { follow: true })) {
    chunks.push(chunk);
    if (chunks.length === 1) {
      stateAtFirstChunk = (await executor.status(handle)).state;
      await onFirstChunk();
    }
  }
  return { chunks, stateAtFirstChunk };
}

export const text = (chunks: LogChunk[], stream: LogChunk['stream']): string =>
  chunks
    .filter((c) => c.stream === stream)
    .map((c) => c.data)
    .join('');
