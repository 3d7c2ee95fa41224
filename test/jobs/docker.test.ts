// Jobs in real containers, through a real node process and the real Docker engine
// (.ci/docker-setup.sh starts one and builds the test image). Without an engine these tests
// skip with the reason, unless DMS_REQUIRE_DOCKER=1 makes its absence a failure, as in CI.
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { dockerForTests, OVER_ITS_MEMORY, stopDockerNodes, TEST_IMAGE } from '../helpers/docker.js';
import type { Job, JobSpecInput } from '../../behaviors/jobs/schema.js';
import { type NodeProcess, runCli } from '../helpers/node.js';
import { MiB, Rest, startJobNode, textOf, until } from './helpers.js';

const IMAGE = TEST_IMAGE;
const { docker, problem } = await dockerForTests('Docker job tests');

const container = (command: string[], opts: { cores?: number; memory?: number; name?: string } = {}): JobSpecInput => ({
  name: opts.name ?? 'container-job',
  image: IMAGE,
  command,
  resources: { cpu: { cores: opts.cores ?? 0.5 }, memory: { size: opts.memory ?? 64 * MiB } },
});

/** Containers of this node's job, by their label; [] once the node removed them. */
const containersOf = (job: Job) => docker.listContainers({ all: true, filters: { label: [`dms.job=${job.id}`] } });

describe.skipIf(problem !== null)('docker jobs on a node', () => {
  let node: NodeProcess;
  let rest: Rest;
  const nodes: NodeProcess[] = [];

  beforeAll(async () => {
    node = await startJobNode();
    nodes.push(node);
    rest = new Rest(node.url);
  });

  afterAll(() => stopDockerNodes(docker, nodes));

  it('completes a job that prints and exits 0, keeps its output, and removes its container', async () => {
    const job = await rest.submit(container(['sh', '-c', 'echo hello from a container; echo to stderr >&2']));
    const done = await rest.waitFor(job.id);
    expect(done).toMatchObject({ status: 'completed', exit_code: 0, error: null, node: node.peerId });
    expect(done.container_id).toMatch(/^[0-9a-f]{64}$/);
    const logs = (await rest.get(`/api/v1/jobs/${job.id}/logs`)).body;
    expect(textOf(logs.chunks)).toBe('hello from a container\n');
    expect(textOf(logs.chunks, 'stderr')).toBe('to stderr\n');
    await until('its container to be removed', async () => (await containersOf(job)).length === 0);
  });

  it('dms jobs submit --follow shows progress and output, and exits with the job\'s exit code', async () => {
    const spec = join(node.home, 'exit3.yaml');
    writeFileSync(spec, `name: exit3\nimage: ${IMAGE}\ncommand: [sh, -c, "echo before exit; exit 3"]\nresources:\n  cpu: {cores: 0.5}\n  memory: {size: ${64 * MiB}}\n`);
    const failed = await runCli(['--home', node.home, 'jobs', 'submit', spec, '--follow']);
    expect(failed.code).toBe(3);
    expect(failed.stdout).toBe('before exit\n');
    // Progress is what the follower saw before the end; a fast container may skip 'running'.
    expect(failed.stderr).toMatch(/\[dms\] job [0-9a-f-]{36}: (pending|running)\n/);
    expect(failed.stderr).toMatch(/\[dms\] job [0-9a-f-]{36} failed \(exit code 3\): exited with code 3\n/);
    const id = /job ([0-9a-f-]{36})/.exec(failed.stderr)![1];
    expect(await rest.job(id)).toMatchObject({ status: 'failed', exit_code: 3, error: 'exited with code 3' });

    const ok = join(node.home, 'ok.json');
    writeFileSync(ok, JSON.stringify(container(['echo', 'followed'])));
    const completed = await runCli(['--home', node.home, 'jobs', 'submit', ok, '--follow']);
    expect(completed).toMatchObject({ code: 0, stdout: 'followed\n' });
    const again = await runCli(['--home', node.home, 'jobs', 'logs', /job ([0-9a-f-]{36})/.exec(completed.stderr)![1], '--follow']);
    expect(again).toMatchObject({ code: 0, stdout: 'followed\n' });
  });

  it('fails a job that exits 3 with exit code 3, and one over its memory limit as OOM', async () => {
    const exit3 = await rest.submit(container(['sh', '-c', 'exit 3']));
    const oom = await rest.submit(container(OVER_ITS_MEMORY, { memory: 16 * MiB }));
    expect(await rest.waitFor(exit3.id)).toMatchObject({ status: 'failed', exit_code: 3, error: 'exited with code 3' });
    expect(await rest.waitFor(oom.id, undefined, 50_000)).toMatchObject({ status: 'failed', exit_code: 137, error: 'killed: out of memory (limit 16 MiB)' });
  }, 60_000);

  it('cancel of a running job stops its container and frees its resources', async () => {
    const before = (await rest.get('/api/v1/resources/usage')).body;
    const job = await rest.submit(container(['sleep', '600'], { cores: 1, memory: 128 * MiB }));
    const running = await rest.waitFor(job.id, ['running']);
    const during = (await rest.get('/api/v1/resources/usage')).body;
    expect(during.allocated.cpu.cores).toBeCloseTo(before.allocated.cpu.cores + 1);
    expect(during.allocated.memory.size).toBe(before.allocated.memory.size + 128 * MiB);
    expect((await docker.getContainer(running.container_id!).inspect()).State.Running).toBe(true);

    const cancelled = await rest.delete<Job>(`/api/v1/jobs/${job.id}`);
    expect(cancelled.status).toBe(200);
    expect(cancelled.body).toMatchObject({ status: 'failed', error: 'cancelled' });
    await expect(docker.getContainer(running.container_id!).inspect()).rejects.toMatchObject({ statusCode: 404 });
    expect((await rest.get('/api/v1/resources/usage')).body).toEqual(before);
  });

  it('keeps a job that does not fit pending with the reason, and starts it when resources free up', async () => {
    await rest.put('/api/v1/device/config', { onboarded: { cpu: { cores: 1 }, memory: { size: 512 * MiB } } });
    try {
      const first = await rest.submit(container(['sleep', '600'], { cores: 1 }));
      await rest.waitFor(first.id, ['running']);
      const second = await rest.submit(container(['echo', 'my turn'], { cores: 1 }));
      const waiting = await until('the second job to say why it waits', async () => {
        const job = await rest.job(second.id);
        return job.pending_reason ? job : undefined;
      });
      expect(waiting).toMatchObject({ status: 'pending', pending_reason: 'waiting for resources: not enough cpu: 1 core asked, 0 cores free of 1 core onboarded' });
      expect(await containersOf(second)).toEqual([]);

      await rest.delete(`/api/v1/jobs/${first.id}`);
      expect(await rest.waitFor(second.id)).toMatchObject({ status: 'completed', exit_code: 0 });
      expect(textOf((await rest.get(`/api/v1/jobs/${second.id}/logs`)).body.chunks)).toBe('my turn\n');
    } finally {
      await rest.put('/api/v1/device/config', { onboarded: null });
    }
  });

  it('after kill -9 and a restart, follows the container that kept running and fails the one that vanished', async () => {
    const crashing = await startJobNode();
    nodes.push(crashing);
    const before = new Rest(crashing.url);
    const survivor = await before.submit(container(['sh', '-c', 'echo started; sleep 4; echo survived'], { cores: 0.5 }));
    const doomed = await before.submit(container(['sleep', '600'], { cores: 0.5 }));
    await before.waitFor(survivor.id, ['running']);
    const { container_id: doomedContainer } = await before.waitFor(doomed.id, ['running']);

    await crashing.kill();
    await docker.getContainer(doomedContainer!).remove({ force: true });
    const restarted = await startJobNode({ home: crashing.home });
    nodes.push(restarted);
    const after = new Rest(restarted.url);

    expect(await after.waitFor(doomed.id)).toMatchObject({ status: 'failed', error: 'its container no longer exists' });
    const done = await after.waitFor(survivor.id);
    expect(done).toMatchObject({ status: 'completed', exit_code: 0 });
    // Docker kept the whole output, including what was written while no node watched.
    expect(textOf((await after.get(`/api/v1/jobs/${survivor.id}/logs`)).body.chunks)).toBe('started\nsurvived\n');
    expect((await after.get('/api/v1/resources/usage')).body.allocated.cpu.cores).toBe(0);
  });
});

// With the stop grace a node has by default (jobs.stop_grace_s, 10 s), not the 1 s of the tests above.
describe.skipIf(problem !== null)('stopping a container with the default grace', () => {
  let node: NodeProcess;
  let rest: Rest;

  beforeAll(async () => {
    node = await startJobNode({ jobs: { stop_grace_s: 10 } });
    rest = new Rest(node.url);
  });

  afterAll(() => stopDockerNodes(docker, [node]));

  // A `sleep` run as a container's first process has no handler for SIGTERM, which the kernel
  // then drops: the stop used to wait out the whole grace before its SIGKILL.
  it('ends at once a job whose first process would never see the stop signal', async () => {
    const job = await rest.submit(container(['sleep', '600']));
    await rest.waitFor(job.id, ['running']);
    const t0 = Date.now();
    const cancelled = await rest.delete<Job>(`/api/v1/jobs/${job.id}`);
    const took = Date.now() - t0;
    expect(cancelled.body).toMatchObject({ status: 'failed', error: 'cancelled' });
    expect(took, `the cancel took ${took} ms`).toBeLessThan(5_000);
  });

  it('gives the grace to a job that handles the stop signal, which ends on its own terms', async () => {
    const job = await rest.submit(container(['sh', '-c', 'trap "echo got TERM; exit 0" TERM; echo ready; while :; do sleep 0.1; done']));
    await until('the job to say it is ready', async () => textOf((await rest.get(`/api/v1/jobs/${job.id}/logs`)).body.chunks ?? []).includes('ready'));
    const cancelled = await rest.delete<Job>(`/api/v1/jobs/${job.id}`);
    expect(cancelled.body).toMatchObject({ status: 'failed', error: 'cancelled' });
    expect(textOf((await rest.get(`/api/v1/jobs/${job.id}/logs`)).body.chunks)).toBe('ready\ngot TERM\n');
  });
});

// What a job may write into its container: the engine bounds it only on file systems this
// machine lacks, so the node measures it (actors/executors/storage-watch.ts).
describe.skipIf(problem !== null)('a job writing into its container', () => {
  let node: NodeProcess;
  let rest: Rest;

  beforeAll(async () => {
    node = await startJobNode({ jobs: { storage_check_ms: 200, default_resources: { storage_bytes: 8 * MiB } } });
    rest = new Rest(node.url);
  });

  afterAll(() => stopDockerNodes(docker, [node]));

  it('is stopped once it wrote more than it may, and its error says how much', async () => {
    const job = await rest.submit(container(['sh', '-c', 'dd if=/dev/zero of=/big bs=1048576 count=32 2>/dev/null; echo written; sleep 60']));
    const failed = await rest.waitFor(job.id, ['completed', 'failed'], 30_000);
    expect(failed.status).toBe('failed');
    expect(failed.error).toMatch(/^killed: wrote \d+(\.\d+)? MiB into its container, more than the 8 MiB it may \(resources\.storage, dms run --disk; jobs\.default_resources\.storage_bytes when it reserves none\)$/);
  });

  it('runs to its end when it writes what it reserved', async () => {
    const spec = { ...container(['sh', '-c', 'dd if=/dev/zero of=/big bs=1048576 count=32 2>/dev/null; sleep 1; echo done']), resources: { cpu: { cores: 0.5 }, memory: { size: 64 * MiB }, storage: { size: 64 * MiB } } };
    const job = await rest.submit(spec);
    expect(await rest.waitFor(job.id)).toMatchObject({ status: 'completed', exit_code: 0 });
  });

  it('is stopped once a volume it writes holds more than the volume\'s size, and one within it runs to its end', async () => {
    expect((await rest.post('/api/v1/volumes', { name: 'small', size: '4MiB' })).status).toBe(201);
    const writes = (mib: number, then: string) => ({ ...container(['sh', '-c', `dd if=/dev/zero of=/v/f${mib} bs=1048576 count=${mib} 2>/dev/null; ${then}`]), inputs: [{ source: 'volume:small', path: '/v', writable: true }] });
    const within = await rest.submit(writes(2, 'sleep 1; echo done'));
    expect(await rest.waitFor(within.id)).toMatchObject({ status: 'completed', exit_code: 0 });
    // Past the size, the job sleeps on: only the periodic measure can end it.
    const past = await rest.submit(writes(8, 'echo written; sleep 60'));
    const failed = await rest.waitFor(past.id, ['completed', 'failed'], 30_000);
    expect(failed.status).toBe('failed');
    expect(failed.error).toMatch(/^killed: wrote into volume small until it held more than its size, 4 MiB \(at least \d+(\.\d+)? MiB counted\)$/);
  });
});

// A volume's writes outlive the container: one that passed its size between two measures is
// measured once more when the job ends (actors/executors/storage-watch.ts).
describe.skipIf(problem !== null)('a job that fills a volume and exits before it is measured', () => {
  let node: NodeProcess;
  let rest: Rest;

  beforeAll(async () => {
    node = await startJobNode({ jobs: { storage_check_ms: 3_600_000 } });
    rest = new Rest(node.url);
  });

  afterAll(() => stopDockerNodes(docker, [node]));

  it('fails, naming the volume and its size', async () => {
    expect((await rest.post('/api/v1/volumes', { name: 'small', size: '2MiB' })).status).toBe(201);
    const spec = { ...container(['sh', '-c', 'dd if=/dev/zero of=/v/big bs=1048576 count=6 2>/dev/null; echo written']), inputs: [{ source: 'volume:small', path: '/v', writable: true }] };
    const job = await rest.submit(spec);
    const ended = await rest.waitFor(job.id, ['completed', 'failed'], 30_000);
    expect(ended).toMatchObject({ status: 'failed', exit_code: 0 });
    expect(ended.error).toMatch(/^killed: wrote into volume small until it held more than its size, 2 MiB \(at least \d+(\.\d+)? MiB counted\)$/);
    expect(textOf((await rest.get(`/api/v1/jobs/${job.id}/logs`)).body.chunks)).toBe('written\n');
  });
});
