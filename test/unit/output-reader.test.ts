import { describe, expect, it } from 'vitest';
import type { ExecutionHandle } from '../../behaviors/jobs/execution.js';
import type { Job } from '../../behaviors/jobs/schema.js';
import type { ExecutorClient } from '../../actors/orchestrator/executors.js';
import { type JobState, type LogSource, OutputReader } from '../../actors/orchestrator/logs.js';
import { JobRun } from '../../actors/orchestrator/run.js';
import type { Storage } from '../../storage/index.js';
import { jobOf } from '../executors/helpers.js';

// A follower's poll of a job this node runs answers from the run's own record: read from the
// database instead, the poll that should see a job's end waited behind the commit of that very
// end (one connection), 2-4 ms on a Docker job's path (bench/RESULTS.md, bench:jobs).

/** The machine a JobRun observes, of a run started (`handle`) or not yet: only subscribe and the snapshot are used while nothing starts it. */
const machineOf = (handle: ExecutionHandle | null, status: 'active' | 'done' = 'active') =>
  ({ subscribe: () => ({ unsubscribe() {} }), getSnapshot: () => ({ status, context: { handle } }) }) as unknown as JobRun['machine'];
const idleMachine = machineOf({ executor: 'null', job_id: 'j', id: 'j' });

function setup(stored: Job | null) {
  const reads = { db: 0 };
  const storage = { jobs: { get: async () => (reads.db++, stored) } } as unknown as Storage;
  const executor = {
    readLogs: async (_h: ExecutionHandle, from: number) => (from === 0 ? { chunks: [{ stream: 'stdout', data: 'hi\n', at: new Date().toISOString() }], next: 3, size: 3 } : { chunks: [], next: 3, size: 3 }),
    waitForLogs: async () => false,
  } as unknown as ExecutorClient;
  const runs = new Map<string, JobRun>();
  const ended = new Map<string, JobState>();
  const source = (job: JobState): LogSource => ({ executor, handle: { executor: 'null', job_id: job.id, id: job.id } });
  return { reads, runs, ended, reader: new OutputReader(runs, ended, storage, source) };
}

describe('OutputReader', () => {
  it('answers a job this node runs from its run, without reading the database', async () => {
    const running: Job = { ...jobOf({ executor: 'null', image: 'none' }), status: 'running' };
    const { reads, runs, reader } = setup(null);
    runs.set(running.id, new JobRun(running, idleMachine));
    const page = await reader.read({ id: running.id, from: 0, limit: 1024, wait_ms: 0 });
    expect(page).toMatchObject({ status: 'running', next: 3, done: false });
    expect(reads.db).toBe(0);
  });

  it('shows a run not started yet no output, whatever a run of the job before left (placed here again)', async () => {
    const pending: Job = { ...jobOf({ executor: 'null', image: 'none' }), status: 'pending' };
    const { runs, reader } = setup(null);
    runs.set(pending.id, new JobRun(pending, machineOf(null)));
    expect(await reader.read({ id: pending.id, from: 0, limit: 1024, wait_ms: 0 })).toMatchObject({ status: 'pending', chunks: [], next: 0, done: false });
  });

  it('hands a follower waiting on the run its committed end, then reads the database only for a job no longer run', async () => {
    const running: Job = { ...jobOf({ executor: 'null', image: 'none' }), status: 'running' };
    const ended: Job = { ...running, status: 'completed', exit_code: 0 };
    const { reads, runs, reader } = setup(ended);
    const run = new JobRun(running, idleMachine);
    runs.set(running.id, run);
    const waiting = reader.read({ id: running.id, from: 3, limit: 1024, wait_ms: 5_000 });
    await new Promise((r) => setTimeout(r, 20));
    runs.delete(running.id);
    run.end({ job: ended });
    expect(await waiting).toMatchObject({ status: 'completed', exit_code: 0, done: true });
    expect(reads.db).toBe(0);
    // Asked afresh once the run is gone: the stored record is what there is.
    expect(await reader.read({ id: running.id, from: 3, limit: 1024, wait_ms: 0 })).toMatchObject({ status: 'completed', done: true });
    expect(reads.db).toBe(1);
  });

  it('gives a follower of a run whose end is being committed the rest of its output and the end in one answer', async () => {
    const running: Job = { ...jobOf({ executor: 'null', image: 'none' }), status: 'running' };
    const ended: Job = { ...running, status: 'completed', exit_code: 0 };
    const { reads, runs, reader } = setup(null);
    const run = new JobRun(running, machineOf({ executor: 'null', job_id: running.id, id: running.id }, 'done'));
    runs.set(running.id, run);
    let answered = false;
    const waiting = reader.read({ id: running.id, from: 0, limit: 1024, wait_ms: 5_000 }).finally(() => (answered = true));
    await new Promise((r) => setTimeout(r, 20));
    // Its output is all in, but the answer waits for the end rather than send the end on a poll of its own.
    expect(answered).toBe(false);
    runs.delete(running.id);
    run.end({ job: ended });
    const page = await waiting;
    expect(page).toMatchObject({ status: 'completed', exit_code: 0, done: true });
    expect(page.chunks.map((c) => c.data)).toEqual(['hi\n']);
    expect(reads.db).toBe(0);
    // A reader that may not wait is answered at once, its end or not.
    const other = new JobRun({ ...running, id: 'other' }, machineOf({ executor: 'null', job_id: 'other', id: 'other' }, 'done'));
    runs.set('other', other);
    expect(await reader.read({ id: 'other', from: 0, limit: 1024, wait_ms: 0 })).toMatchObject({ status: 'running', done: false, next: 3 });
  });

  it('answers a job that ended a moment ago from its final record, without reading the database', async () => {
    const done: Job = { ...jobOf({ executor: 'null', image: 'none' }), status: 'completed', exit_code: 0 };
    const { reads, ended, reader } = setup(null);
    ended.set(done.id, done);
    const page = await reader.read({ id: done.id, from: 0, limit: 1024, wait_ms: 0 });
    expect(page).toMatchObject({ status: 'completed', exit_code: 0, next: 3, done: true });
    expect(page.chunks.map((c) => c.data)).toEqual(['hi\n']);
    expect(reads.db).toBe(0);
  });
});
