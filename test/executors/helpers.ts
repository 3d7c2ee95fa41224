import { randomUUID } from 'node:crypto';
import type { Job, JobSpec, ResourceSpec } from '../../behaviors/jobs/schema.js';
import type { Executor, ExecutionHandle, LogChunk } from '../../behaviors/jobs/execution.js';

/** A job record as storage would hand it to an executor. */
/** A spec in its canonical (parsed) form, as executors get it; storage may be left out. */
type TestSpec = Partial<Omit<JobSpec, 'resources'>> & { requester?: string | null; ensemble?: string | null; part?: string | null; executor: string; resources?: Omit<ResourceSpec, 'storage'> & Partial<Pick<ResourceSpec, 'storage'>> };

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
    ports: spec.ports ?? [],
    ensemble: spec.ensemble ?? null,
    part: spec.part ?? null,
    created_at: now,
    updated_at: now,
  };
}

/** Whether the run has ended, asked without waiting for it (the executor's `wait` settling). */
export function ended(executor: Executor, handle: ExecutionHandle): () => boolean {
  let done = false;
  executor.wait(handle).then(
    () => (done = true),
    () => (done = true),
  );
  return () => done;
}

/** Pages through the output as the node reads it (readLogs); with `follow`, waits for more until none is coming. */
export async function collect(executor: Executor, handle: ExecutionHandle, follow = false, onChunk: (chunk: LogChunk) => Promise<void> | void = () => {}): Promise<LogChunk[]> {
  const chunks: LogChunk[] = [];
  let from = 0;
  for (;;) {
    const page = await executor.readLogs(handle, from, 64 * 1024);
    for (const chunk of page.chunks) {
      chunks.push(chunk);
      await onChunk(chunk);
    }
    from = page.next;
    if (page.next < page.size) continue;
    if (!follow || !(await executor.waitForLogs(handle, from, AbortSignal.timeout(20_000)))) return chunks;
  }
}

/**
 * Follows a run's output to its end, noting whether the run had ended when the first chunk
 * arrived: `running` there is proof that chunks streamed while the run went on instead of
 * arriving together at the end. `onFirstChunk` runs after that is read, so a test can let the
 * run go on only once its first output was seen (no race with the clock).
 */
export async function followLive(
  executor: Executor,
  handle: ExecutionHandle,
  onFirstChunk: () => Promise<void> | void = () => {},
): Promise<{ chunks: LogChunk[]; stateAtFirstChunk: string | undefined }> {
  const hasEnded = ended(executor, handle);
  let stateAtFirstChunk: string | undefined;
  const chunks = await collect(executor, handle, true, async () => {
    if (stateAtFirstChunk !== undefined) return;
    // A turn for a settled wait to be seen.
    await new Promise((r) => setImmediate(r));
    stateAtFirstChunk = hasEnded() ? 'exited' : 'running';
    await onFirstChunk();
  });
  return { chunks, stateAtFirstChunk };
}

export const text = (chunks: LogChunk[], stream: LogChunk['stream']): string =>
  chunks
    .filter((c) => c.stream === stream)
    .map((c) => c.data)
    .join('');
