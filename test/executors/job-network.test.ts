/**
 * A job's own network (a stranger's job with ports gets an internal one, `dms-job-<id>`) is made
 * and removed with it, and a job without one costs the engine no network call. Every clean-up
 * asked the engine to remove `dms-job-<id>` whether or not the job had one: a refused call (404)
 * for every job, seen tracing a node's engine calls for one `echo hi`.
 *
 * The executor runs in the test's process against a stand-in engine
 * (test/helpers/stand-in-engine.ts), which records every request.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DockerExecutor } from '../../actors/executors/docker.js';
import type { Job } from '../../behaviors/jobs/schema.js';
import { StandInEngine } from '../helpers/stand-in-engine.js';
import { jobOf } from './helpers.js';

describe("a job's own network", { timeout: 20_000 }, () => {
  let engine: StandInEngine;
  let dir: string;
  const executor = (nodeId: string) =>
    new DockerExecutor({ docker: engine.client(), nodeId, logsDir: join(dir, nodeId), stopGraceSeconds: 1, engineAnswerMs: 2_000 } as ConstructorParameters<typeof DockerExecutor>[0]);

  beforeAll(async () => {
    engine = await new StandInEngine().listen();
    dir = await mkdtemp(join(tmpdir(), 'dms-job-network-'));
  });

  afterAll(async () => {
    engine?.close();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  /** The network requests the engine saw for `job`. */
  const networkCalls = (job: Job) => engine.seen.filter((r) => r.includes(`dms-job-${job.id}`) || (r.startsWith('POST /networks/create') && r.includes(job.id)));

  /** Starts `job`, stops it and cleans up after it, as the executor actor does. */
  async function runToTheEnd(ex: DockerExecutor, job: Job): Promise<void> {
    const handle = await ex.start(job);
    await ex.cancel(handle, 'done');
    await ex.cleanup(handle);
  }

  it('is neither made nor removed for a job without one', async () => {
    const ex = executor('node-a');
    const own = jobOf({ executor: 'docker', command: ['true'] });
    const strangers = jobOf({ executor: 'docker', command: ['true'], requester: '12D3KooWRequester' });
    for (const job of [own, strangers]) await runToTheEnd(ex, job);
    expect(networkCalls(own)).toEqual([]);
    expect(networkCalls(strangers)).toEqual([]);
    expect(engine.asked(/^DELETE \/networks\//)).toBe(false);
  });

  it("is made for a stranger's job with ports and removed with it", async () => {
    const job = jobOf({ executor: 'docker', command: ['true'], requester: '12D3KooWRequester', ports: [8080] });
    await runToTheEnd(executor('node-b'), job);
    expect(engine.asked(/^POST \/networks\/create/)).toBe(true);
    expect(networkCalls(job)).toContain(`DELETE /networks/dms-job-${job.id}`);
  });

  it('is removed by the next process for a run it picked up, and only when the container was on it', async () => {
    const earlier = executor('node-c');
    const withPorts = jobOf({ executor: 'docker', command: ['true'], requester: '12D3KooWRequester', ports: [8080] });
    const without = jobOf({ executor: 'docker', command: ['true'], requester: '12D3KooWRequester' });
    const handles = [await earlier.start(withPorts), await earlier.start(without)];
    // The process that started them is gone; the next one picks the runs up and ends them.
    const next = executor('node-c');
    for (const handle of handles) {
      await next.cancel(handle, 'done');
      await next.cleanup(handle);
    }
    expect(networkCalls(withPorts)).toContain(`DELETE /networks/dms-job-${withPorts.id}`);
    expect(networkCalls(without).filter((r) => r.startsWith('DELETE'))).toEqual([]);
  });

  it('is still asked to go when nothing says whether the job had one', async () => {
    const job = jobOf({ executor: 'docker', command: ['true'] });
    const handle = await executor('node-d').start(job);
    // A process that never picked the run up: its container is removed, and the network with it if there is one.
    await executor('node-d').cleanup(handle);
    expect(networkCalls(job)).toContain(`DELETE /networks/dms-job-${job.id}`);
  });
});
