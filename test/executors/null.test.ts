import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { NullExecutor } from '../../actors/executors/null.js';
import { ExecutorClients } from '../../actors/executors/clients.js';
import { outcome } from '../../behaviors/jobs/execution.js';
import { DmsError } from '../../runtime/errors.js';
import { waitFor } from '../helpers/network.js';
import { collect, ended, followLive, jobOf, text } from './helpers.js';

let dir: string;
let executor: NullExecutor;

beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'dms-null-'));
  executor = new NullExecutor({ logsDir: dir });
});
afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

const nullJob = (environment: Record<string, string>) => jobOf({ executor: 'null', environment });

/** Runs `job` (again) with `environment` to its end and lets go of the run, as the orchestrator does. */
async function runToEnd(job: ReturnType<typeof nullJob>, environment: Record<string, string>) {
  const handle = await executor.start({ ...job, environment });
  await executor.wait(handle);
  await executor.cleanup(handle);
  return handle;
}

describe('null executor', () => {
  it('runs for the asked duration and completes with exit code 0', async () => {
    const job = nullJob({ DMS_NULL_DURATION_MS: '200' });
    const began = Date.now();
    const handle = await executor.start(job);
    expect(handle).toEqual({ executor: 'null', job_id: job.id, id: job.id });
    const result = await executor.wait(handle);
    expect(Date.now() - began).toBeGreaterThanOrEqual(190);
    expect(result).toEqual({ exit_code: 0, oom_killed: false });
    expect(outcome(result)).toEqual({ status: 'completed', error: null });
    expect(await executor.wait(handle)).toEqual(result);
  });

  it('ends with the asked exit code', async () => {
    const handle = await executor.start(nullJob({ DMS_NULL_EXIT_CODE: '3' }));
    const result = await executor.wait(handle);
    expect(result).toEqual({ exit_code: 3, oom_killed: false });
    expect(outcome(result)).toEqual({ status: 'failed', error: 'exited with code 3' });
  });

  it('can end as killed for memory', async () => {
    const result = await executor.wait(await executor.start(nullJob({ DMS_NULL_OOM: '1' })));
    expect(result).toMatchObject({ exit_code: 137, oom_killed: true });
    expect(outcome(result).error).toContain('out of memory');
  });

  it('streams its output while running, stdout and stderr apart, and ends the stream with the run', async () => {
    // The first line is written at once, the last two seconds later: room for a loaded machine.
    const handle = await executor.start(
      nullJob({ DMS_NULL_DURATION_MS: '3000', DMS_NULL_STDOUT: 'one\ntwo\n', DMS_NULL_STDERR: 'oops' }),
    );
    const { chunks, stateAtFirstChunk } = await followLive(executor, handle);
    expect(text(chunks, 'stdout')).toBe('one\ntwo\n');
    expect(text(chunks, 'stderr')).toBe('oops\n');
    expect(chunks.map((c) => c.stream)).toEqual(['stdout', 'stdout', 'stderr']);
    // Followed live: the first line came while the run was still going.
    expect(stateAtFirstChunk).toBe('running');
    expect(await executor.wait(handle)).toEqual({ exit_code: 0, oom_killed: false });
    expect(await collect(executor, handle)).toEqual(chunks);
  });

  it('starts a job placed here again with no output of the run before, even a run that writes none', async () => {
    const job = nullJob({});
    const first = await runToEnd(job, { DMS_NULL_STDOUT: 'first run' });
    expect(text(await collect(executor, first), 'stdout')).toBe('first run\n');
    const again = await runToEnd(job, {});
    expect(await collect(executor, again)).toEqual([]);
  });

  it("keeps the output of the run before the current one, and only that run's", async () => {
    const job = nullJob({});
    const run = (environment: Record<string, string>) => runToEnd(job, environment);
    const previousText = async (handle: Awaited<ReturnType<typeof run>>) => {
      const page = await executor.readPreviousLogs(handle, 0, 1024);
      return page && page.chunks.map((c) => c.data).join('');
    };
    const first = await run({ DMS_NULL_STDOUT: 'run one' });
    expect(await previousText(first)).toBeNull();
    const second = await run({ DMS_NULL_STDOUT: 'run two' });
    expect(await previousText(second)).toBe('run one\n');
    expect(text(await collect(executor, second), 'stdout')).toBe('run two\n');
    // A run that writes nothing still moves the one before aside: its own output is none.
    const third = await run({});
    expect(await previousText(third)).toBe('run two\n');
    expect(await collect(executor, third)).toEqual([]);
  });

  it('gives a reader that names the log it was in the rest of it, then the new run\'s from its start', async () => {
    const job = nullJob({});
    const run = (stdout: string) => runToEnd(job, { DMS_NULL_STDOUT: stdout });
    const first = await run('a\nb\nc');
    const page = await executor.readLogs(first, 0, 1);
    expect(page.chunks.map((c) => c.data)).toEqual(['a\n']);
    const second = await run('x\ny');
    // Read on by offset alone, the first run's place lands inside the second's output.
    expect((await executor.readLogs(second, page.next, 1)).chunks.map((c) => c.data)).toEqual(['y\n']);
    const seen: string[] = [];
    let at = { next: page.next, log: page.log ?? undefined };
    for (let i = 0; i < 10; i++) {
      const p = await executor.readLogs(second, at.next, 1, at.log);
      seen.push(...p.chunks.map((c) => c.data));
      if (!p.ahead && p.next >= p.size) break;
      at = { next: p.next, log: p.log ?? undefined };
    }
    expect(seen).toEqual(['b\n', 'c\n', 'x\n', 'y\n']);
    // A log no run of the job wrote: the current run's output from its start.
    expect((await executor.readLogs(second, 5, 1, '1.2')).chunks.map((c) => c.data)).toEqual(['x\n']);
  });

  it('ends a wait for more output when its signal aborts', async () => {
    const handle = await executor.start(nullJob({ DMS_NULL_DURATION_MS: '60000', DMS_NULL_STDOUT: 'first' }));
    const hasEnded = ended(executor, handle);
    const page = await waitFor('the first line', async () => {
      const p = await executor.readLogs(handle, 0, 1024);
      return p.chunks.length === 1 ? p : undefined;
    }, { intervalMs: 10, timeoutMs: 10_000 });
    expect(page.chunks.map((c) => c.data)).toEqual(['first\n']);
    // Abort while the wait has nothing to wait for but more output.
    const controller = new AbortController();
    const waiting = executor.waitForLogs(handle, page.next, controller.signal);
    controller.abort();
    expect(await waiting).toBe(false);
    // The signal ended the wait, not the run, which goes on for a minute.
    expect(hasEnded()).toBe(false);
    await executor.cleanup(handle);
  });

  it('cancels a run at once, naming the reason', async () => {
    const RUN_MS = 120_000;
    const handle = await executor.start(nullJob({ DMS_NULL_DURATION_MS: String(RUN_MS) }));
    const began = Date.now();
    await executor.cancel(handle, 'cancelled by user');
    const result = await executor.wait(handle);
    // At once means not at the run's end; the margin is for a loaded machine.
    expect(Date.now() - began).toBeLessThan(RUN_MS / 6);
    expect(result).toEqual({ exit_code: 143, oom_killed: false, error: 'cancelled: cancelled by user' });
    await executor.cleanup(handle);
    await expect(executor.wait(handle)).rejects.toMatchObject({ kind: 'not_found' });
    // Nothing left to stop: cancelling it again is not an error.
    await executor.cancel(handle, 'again');
  });

  it('fails to start when told to, and rejects malformed options', async () => {
    await expect(executor.start(nullJob({ DMS_NULL_START_ERROR: 'image gone' }))).rejects.toThrow('image gone');
    const e = await executor.start(nullJob({ DMS_NULL_EXIT_CODE: 'three' })).catch((e: unknown) => e);
    expect(e).toBeInstanceOf(DmsError);
    expect((e as DmsError).kind).toBe('invalid');
    expect((e as DmsError).message).toContain('DMS_NULL_EXIT_CODE');
    // Longer than a timer can wait: refused, not run for a millisecond (Node cuts such a delay to 1 ms).
    const long = await executor.start(nullJob({ DMS_NULL_DURATION_MS: '99999999999999999999' })).catch((e: unknown) => e);
    expect(long).toMatchObject({ kind: 'invalid', message: expect.stringContaining('DMS_NULL_DURATION_MS') });
  });

  it('reports every known job missing after a restart', async () => {
    const running = await executor.start(nullJob({ DMS_NULL_DURATION_MS: '10000' }));
    const restarted = new NullExecutor({ logsDir: dir });
    const report = await restarted.reconcile([running.job_id]);
    expect(report.reattached).toEqual([]);
    expect(report.missing).toEqual([{ job_id: running.job_id, reason: expect.stringContaining('restart') }]);
    expect((await executor.reconcile([running.job_id])).missing).toEqual([]);
    await executor.cleanup(running);
  });
});

describe('executor clients by name', () => {
  it('finds executors by name and refuses a second one with the same name', () => {
    const registry = new ExecutorClients<NullExecutor>();
    registry.register(executor);
    expect(registry.get('null')).toBe(executor);
    expect(registry.has('docker')).toBe(false);
    expect(registry.names()).toEqual(['null']);
    expect(registry.all()).toEqual([executor]);
    expect(() => registry.register(new NullExecutor({ logsDir: dir }))).toThrow(/already registered/);
    expect(() => registry.get('docker')).toThrow('no executor named "docker" (available: null)');
  });
});
