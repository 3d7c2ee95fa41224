/**
 * The Docker executor with an engine that accepts connections and does not answer some of its
 * requests (a wedged dockerd): each request it makes is given up once the engine has said
 * nothing for the executor's bound, with an error naming the engine and what was asked, so a
 * start fails, a cancel ends its run and a clean-up gives up in bounded time. What waits for
 * good by its nature (the wait for a container's exit, the follow of its output) is bounded in
 * its first answer only, and the follow by one bound more once the container exited.
 *
 * The executor runs in the test's process against a stand-in engine (test/helpers/stand-in-engine.ts),
 * told which requests to leave unanswered.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { DockerExecutor } from '../../actors/executors/docker.js';
import type { ExecutionHandle } from '../../behaviors/jobs/execution.js';
import { errorText } from '../../runtime/errors.js';
import { settledWithin } from '../../runtime/deadline.js';
import { StandInEngine } from '../helpers/stand-in-engine.js';
import { ended, jobOf } from './helpers.js';
import { waitFor } from '../helpers/network.js';

/** How long the executor waits for one answer of the engine here. */
const ANSWER_MS = 1_000;
/** When a container the engine did not remove is asked again here. */
const LEFTOVER_MS = 500;
/** Past this, a call was held by the engine rather than bounded (a bound or three, and a margin). */
const BOUNDED_MS = 6_000;

/** How `p` settled within BOUNDED_MS, and when: a call the engine holds shows as still waiting. */
async function outcome<T>(p: Promise<T>): Promise<{ ms: number; value?: T; error?: string; waiting?: true }> {
  const began = performance.now();
  const settled = await settledWithin(
    p.then(
      (value) => ({ value }),
      (e: unknown) => ({ error: errorText(e) }),
    ),
    BOUNDED_MS,
    () => ({ waiting: true as const }),
  );
  return { ms: Math.round(performance.now() - began), ...settled };
}

const unanswered = (what: string) => expect.stringContaining(`the Docker engine did not answer within ${ANSWER_MS} ms (${what})`);

describe('Docker executor with an engine that does not answer', { timeout: 20_000 }, () => {
  let engine: StandInEngine;
  let dir: string;
  let executor: DockerExecutor;

  beforeAll(async () => {
    engine = await new StandInEngine().listen();
    dir = await mkdtemp(join(tmpdir(), 'dms-hung-engine-'));
    executor = new DockerExecutor({
      docker: engine.client(),
      nodeId: 'test-hung-engine',
      logsDir: join(dir, 'logs'),
      stopGraceSeconds: 1,
      engineAnswerMs: ANSWER_MS,
      pullQuietMs: ANSWER_MS,
      leftoverRetry: { firstMs: LEFTOVER_MS, maxMs: LEFTOVER_MS },
      ensembles: { attach: async () => ({ networks: ['dms-ens-a', 'dms-ens-b'], extraHosts: [] }), detach: async () => undefined },
    } as ConstructorParameters<typeof DockerExecutor>[0]);
  });

  afterEach(() => {
    engine.hang = null;
    engine.imagePresent = true;
    engine.pullStalls = false;
    engine.followsOutliveExit = false;
  });

  afterAll(async () => {
    engine?.close();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  const job = (image = 'dms-test/busybox:latest') => jobOf({ executor: 'docker', image, command: ['true'] });
  const start = (j = job()) => outcome(executor.start(j));
  /** A run the engine started, with its exit waited for and its output followed. */
  const running = async (): Promise<ExecutionHandle> => {
    const handle = await executor.start(job());
    expect(ended(executor, handle)(), 'the run ended as it started').toBe(false);
    return handle;
  };

  it('fails a start whose image the engine does not look up', async () => {
    engine.hang = /^GET \/images\//;
    const r = await start();
    expect(r).toMatchObject({ error: unanswered('inspecting image dms-test/busybox:latest') });
    expect(r.ms).toBeLessThan(BOUNDED_MS);
  });

  it("fails a start whose pull the engine does not answer, and one whose pull stalls after it began", async () => {
    engine.imagePresent = false;
    engine.hang = /^POST \/images\/create/;
    const first = await start(job('dms-test/absent:one'));
    expect(first).toMatchObject({ error: unanswered('pulling image dms-test/absent:one') });

    engine.hang = null;
    engine.pullStalls = true;
    const stalled = await start(job('dms-test/absent:two'));
    expect(stalled).toMatchObject({ error: expect.stringContaining(`the Docker engine said nothing more for ${ANSWER_MS} ms (pulling image dms-test/absent:two)`) });
    expect(stalled.ms).toBeLessThan(BOUNDED_MS);
  });

  it('fails a start whose container the engine does not create, or does not start', async () => {
    engine.hang = /^POST \/containers\/create/;
    const created = await start();
    expect(created).toMatchObject({ error: unanswered('creating the container') });
    expect(created.ms).toBeLessThan(BOUNDED_MS);

    engine.hang = /^POST \/containers\/[^/]+\/start/;
    const started = await start();
    expect(started).toMatchObject({ error: unanswered('starting the container') });
    expect(started.ms).toBeLessThan(BOUNDED_MS);
    // The container made was asked to go.
    expect(engine.asked(/^DELETE \/containers\/[^/]+/)).toBe(true);
  });

  it("fails a part's start whose second network the engine does not join", async () => {
    engine.hang = /^POST \/networks\/dms-ens-b\/connect/;
    const r = await start({ ...job(), ensemble: 'e', part: 'web' });
    expect(r).toMatchObject({ error: unanswered('joining network dms-ens-b') });
    expect(r.ms).toBeLessThan(BOUNDED_MS);
  });

  it('leaves a run alone while the engine holds its wait and its output open: those wait for the exit', async () => {
    const handle = await running();
    const hasEnded = ended(executor, handle);
    await new Promise((r) => setTimeout(r, 3 * ANSWER_MS));
    expect(hasEnded(), 'the run was given up while the engine had answered its wait').toBe(false);
    await executor.cancel(handle, 'done');
    expect(await outcome(executor.wait(handle))).toMatchObject({ value: { error: 'cancelled: done' } });
  });

  it("ends a run whose output the engine keeps following after the container exited, saying so in its log", async () => {
    engine.followsOutliveExit = true;
    const handle = await running();
    const r = await outcome(executor.cancel(handle, 'done').then(() => executor.wait(handle)));
    expect(r).toMatchObject({ value: { error: 'cancelled: done' } });
    const page = await executor.readLogs(handle, 0, 65_536);
    expect(page.chunks.map((c) => c.data).join('')).toContain(`the Docker engine kept the container's output open ${ANSWER_MS} ms after the container exited`);
  });

  it("loses a run whose wait for the exit the engine does not answer", async () => {
    engine.hang = /^POST \/containers\/[^/]+\/wait/;
    const handle = await executor.start(job());
    const r = await outcome(executor.wait(handle));
    expect(r).toMatchObject({ error: unanswered('waiting for the container to exit') });
  });

  it('ends a cancelled run whose stop the engine does not answer, and gives up its clean-up', async () => {
    const handle = await running();
    engine.hang = /^POST \/containers\/[^/]+\/stop|^DELETE \/containers\//;
    const cancelled = await outcome(executor.cancel(handle, 'enough'));
    expect(cancelled.waiting, 'the cancel was held by the engine').toBeUndefined();
    // Stop's bound is the grace period and one answer's; the removal's one more.
    expect(cancelled.ms).toBeLessThan(BOUNDED_MS);
    // The engine answers a stop after the grace period: that is added to the bound.
    expect(await outcome(executor.wait(handle))).toMatchObject({ error: expect.stringContaining(`the Docker engine did not answer within ${ANSWER_MS + 1_000} ms (stopping the container)`) });

    const cleaned = await outcome(executor.cleanup(handle));
    expect(cleaned).toMatchObject({ error: unanswered(`removing container ${handle.id}`) });

    // The engine answers again: the container is removed while the node runs, not at its next start.
    engine.hang = null;
    await waitFor('the container the engine did not remove, removed', () => !engine.containers.has(handle.id) || undefined, { timeoutMs: 5 * LEFTOVER_MS });
  });

  it('fails to pick up a run of an earlier process whose container the engine does not inspect', async () => {
    engine.hang = /^GET \/containers\/[^/]+\/json/;
    const handle: ExecutionHandle = { executor: 'docker', job_id: job().id, id: 'standin-earlier' };
    expect(await outcome(executor.wait(handle))).toMatchObject({ error: unanswered('inspecting container standin-earlier') });
  });

  it("fails to read an output whose archive the engine does not send", async () => {
    const handle = await running();
    engine.hang = /^GET \/containers\/[^/]+\/archive/;
    const r = await outcome(executor.readOutput(handle, { name: 'out', path: '/out' }));
    expect(r).toMatchObject({ error: unanswered('reading /out from the container') });
    // Answered, then nothing: the read gives up rather than waiting for the rest.
    engine.hang = null;
    const content = await executor.readOutput(handle, { name: 'out', path: '/out' });
    const read = await outcome((async () => {
      if (!('tar' in content)) throw new Error('not a tar');
      for await (const chunk of content.tar) void chunk;
    })());
    expect(read).toMatchObject({ error: expect.stringContaining(`the Docker engine said nothing more for ${ANSWER_MS} ms (reading /out from the container)`) });
    await executor.cancel(handle, 'done');
  });
});
