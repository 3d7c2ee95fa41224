// Against a real Docker engine (.ci/docker-setup.sh starts one and builds the test image).
// Without an engine these tests skip with the reason, unless DMS_REQUIRE_DOCKER=1 makes
// its absence a failure, as in CI.
import { randomUUID } from 'node:crypto';
import { mkdirSync } from 'node:fs';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { dockerForTests, OVER_ITS_MEMORY, TEST_IMAGE } from '../helpers/docker.js';
import { containerSpec, DEFAULT_CONTAINER_LIMITS, JOB_LABEL, NODE_LABEL } from '../../actors/executors/container-spec.js';
import { DockerExecutor } from '../../actors/executors/docker.js';
import type { InputMounter } from '../../actors/executors/inputs.js';
import type { Job } from '../../behaviors/jobs/schema.js';
import { outcome } from '../../behaviors/jobs/execution.js';
import { waitFor } from '../helpers/network.js';
import { collect, followLive, jobOf, text } from './helpers.js';

const MiB = 1024 * 1024;
const IMAGE = TEST_IMAGE;
const { docker, problem } = await dockerForTests('Docker executor tests');

/**
 * A shell script that prints `before`, then waits until it gets SIGUSR1 (see `release`), then
 * runs `after`: a container that is sure to be running until the test lets it go on, however
 * slow the machine.
 */
const untilReleased = (before: string, after: string) =>
  `trap 'go=1' USR1; ${before}; while [ -z "$go" ]; do sleep 0.1; done; ${after}`;
const release = (id: string) => docker.getContainer(id).kill({ signal: 'SIGUSR1' });

describe('container spec', () => {
  it('maps resources to engine limits and labels the container with job and node', () => {
    const job = jobOf({
      executor: 'docker',
      command: ['echo', 'hi'],
      environment: { A: '1' },
      resources: { cpu: { cores: 1.5 }, memory: { size: 16 * MiB }, gpu: { count: 2, model: 'A100' } },
    });
    const spec = containerSpec(job, 'peer-x');
    expect(spec).toMatchObject({
      Image: 'dms-test/busybox:latest',
      Cmd: ['echo', 'hi'],
      Env: ['A=1'],
      Labels: { [JOB_LABEL]: job.id, [NODE_LABEL]: 'peer-x' },
      Tty: false,
      HostConfig: {
        NanoCpus: 1_500_000_000,
        Memory: 16 * MiB,
        MemorySwap: 16 * MiB,
        DeviceRequests: [{ Driver: 'nvidia', Count: 2, Capabilities: [['gpu']] }],
      },
    });
    // No container runs unbounded: a job asking for nothing gets the defaults, and every one a pids limit and no-new-privileges.
    const limits = { ...DEFAULT_CONTAINER_LIMITS, defaultCores: 0.5, defaultMemoryBytes: 32 * MiB, pids: 99, logBytes: 4 * MiB };
    const bounded = containerSpec(jobOf({ executor: 'docker', resources: { cpu: { cores: 0 }, memory: { size: 0 } } }), 'p', limits);
    expect(bounded.Cmd).toBeUndefined();
    expect(bounded.HostConfig).toEqual({
      NanoCpus: 500_000_000,
      Memory: 32 * MiB,
      MemorySwap: 32 * MiB,
      PidsLimit: 99,
      SecurityOpt: ['no-new-privileges'],
      CapDrop: ['ALL'],
      NetworkMode: undefined,
      ReadonlyRootfs: false,
      Tmpfs: undefined,
      LogConfig: { Type: 'json-file', Config: { 'max-size': String(4 * MiB), 'max-file': '2' } },
      DeviceRequests: undefined,
    });
    expect(containerSpec(job, 'peer-x', limits).HostConfig).toMatchObject({ NanoCpus: 1_500_000_000, Memory: 16 * MiB, PidsLimit: 99 });
  });

  it("hands the container its secrets as environment variables, a secret winning over a variable of the same name", () => {
    const job = jobOf({ executor: 'docker', environment: { A: '1', TOKEN: 'plain' }, secrets: { TOKEN: 's3cr3t', B: '2' } });
    expect(containerSpec(job, 'peer-x').Env).toEqual(['A=1', 'TOKEN=s3cr3t', 'B=2']);
  });

  it('never gives the engine 0 (unlimited) or less than it accepts, and rounds cores up to whole millicores', () => {
    const spec = (cores: number, size: number) => containerSpec(jobOf({ executor: 'docker', resources: { cpu: { cores }, memory: { size } } }), 'p').HostConfig!;
    // Stored before the floor, or come from a message whose schema has none.
    expect(spec(1e-10, 1)).toMatchObject({ NanoCpus: 10_000_000, Memory: 6 * MiB, MemorySwap: 6 * MiB });
    expect(spec(0.0101, 64 * MiB).NanoCpus).toBe(11_000_000);
    expect(spec(0.57, 64 * MiB).NanoCpus).toBe(570_000_000);
  });

  it("isolates another node's job from the network unless jobs.allow_network; drops capabilities of every job", () => {
    const remote = jobOf({ executor: 'docker' });
    remote.requester = '12D3KooWRequesterRequesterRequesterRequesterReque';
    const local = jobOf({ executor: 'docker' });
    expect(containerSpec(remote, 'p').HostConfig).toMatchObject({ NetworkMode: 'none', CapDrop: ['ALL'], SecurityOpt: ['no-new-privileges'] });
    expect(containerSpec(local, 'p').HostConfig).toMatchObject({ NetworkMode: undefined, CapDrop: ['ALL'] });
    expect(containerSpec(remote, 'p', { ...DEFAULT_CONTAINER_LIMITS, allowNetwork: true }).HostConfig!.NetworkMode).toBeUndefined();
    const hardened = containerSpec(local, 'p', { ...DEFAULT_CONTAINER_LIMITS, user: '65534:65534', readOnlyRoot: true });
    expect(hardened.User).toBe('65534:65534');
    expect(hardened.HostConfig).toMatchObject({ ReadonlyRootfs: true, Tmpfs: { '/tmp': expect.stringContaining('size=') } });
    expect(containerSpec(local, 'p').User).toBeUndefined();
  });
});

describe.skipIf(problem !== null)('docker executor', () => {
  // A node id of its own: the cleanup below removes only this run's containers.
  const nodeId = `test-${randomUUID()}`;
  let dir: string;
  let executor: DockerExecutor;
  const dockerJob = (command: string[], memory = 64 * MiB) =>
    jobOf({ executor: 'docker', image: IMAGE, command, resources: { cpu: { cores: 0.5 }, memory: { size: memory } } });

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'dms-docker-'));
    executor = new DockerExecutor({ docker, nodeId, logsDir: join(dir, 'logs'), stopGraceSeconds: 1 });
    // As its actor does at start: the engine's OOM events are followed live.
    await executor.open();
  });

  afterAll(async () => {
    executor.close();
    const left = await docker.listContainers({ all: true, filters: { label: [`${NODE_LABEL}=${nodeId}`] } });
    await Promise.all(left.map((c) => docker.getContainer(c.Id).remove({ force: true }).catch(() => undefined)));
    await rm(dir, { recursive: true, force: true });
  });

  it('runs a container to exit 0 with stdout and stderr captured apart', async () => {
    const job = dockerJob(['sh', '-c', 'echo out-1; echo err-1 >&2; echo out-2']);
    const handle = await executor.start(job);
    const info = await docker.getContainer(handle.id).inspect();
    expect(info.Config.Labels).toMatchObject({ [JOB_LABEL]: job.id, [NODE_LABEL]: nodeId });
    expect(info.HostConfig).toMatchObject({ NanoCpus: 500_000_000, Memory: 64 * MiB });

    const result = await executor.wait(handle);
    expect(result).toEqual({ exit_code: 0, oom_killed: false });
    expect(outcome(result).status).toBe('completed');
    const chunks = await collect(executor, handle);
    expect(text(chunks, 'stdout')).toBe('out-1\nout-2\n');
    expect(text(chunks, 'stderr')).toBe('err-1\n');
    for (const c of chunks) expect(Date.parse(c.at)).toBeGreaterThan(Date.now() - 60_000);
    expect(await executor.wait(handle)).toEqual(result);
    await executor.cleanup(handle);
    await expect(docker.getContainer(handle.id).inspect()).rejects.toMatchObject({ statusCode: 404 });
  });

  it('follows output live until the container exits', async () => {
    const handle = await executor.start(dockerJob(['sh', '-c', untilReleased('echo line-1', 'echo line-2; sleep 0.4; echo line-3')]));
    expect((await docker.getContainer(handle.id).inspect()).State.Running).toBe(true);
    // The container prints its second line only once the first has reached the follower.
    const { chunks, stateAtFirstChunk } = await followLive(executor, handle, () => release(handle.id));
    expect(text(chunks, 'stdout')).toBe('line-1\nline-2\nline-3\n');
    expect(stateAtFirstChunk).toBe('running');
    expect(await executor.wait(handle)).toEqual({ exit_code: 0, oom_killed: false });
    await executor.cleanup(handle);
  });

  it('reports a non-zero exit code', async () => {
    const handle = await executor.start(dockerJob(['sh', '-c', 'echo failing >&2; exit 3']));
    const result = await executor.wait(handle);
    expect(result).toEqual({ exit_code: 3, oom_killed: false });
    expect(outcome(result)).toEqual({ status: 'failed', error: 'exited with code 3' });
    expect(text(await collect(executor, handle), 'stderr')).toBe('failing\n');
    await executor.cleanup(handle);
  });

  it('detects and names a kill for exceeding the memory limit', async () => {
    const handle = await executor.start(dockerJob(OVER_ITS_MEMORY, 16 * MiB));
    const result = await executor.wait(handle);
    expect(result).toEqual({ exit_code: 137, oom_killed: true, error: 'killed: out of memory (limit 16 MiB)' });
    expect(outcome(result)).toEqual({ status: 'failed', error: 'killed: out of memory (limit 16 MiB)' });
    await executor.cleanup(handle);
  });

  it('cancel stops and removes the container, and the result names the reason', async () => {
    const handle = await executor.start(dockerJob(['sleep', '300']));
    const began = Date.now();
    await executor.cancel(handle, 'cancelled by user');
    // Stopped after the 1 s grace, not at the container's own end; the margin is for a loaded machine.
    expect(Date.now() - began).toBeLessThan(20_000);
    const result = await executor.wait(handle);
    expect(result.error).toBe('cancelled: cancelled by user');
    expect(outcome(result)).toEqual({ status: 'failed', error: 'cancelled: cancelled by user' });
    await expect(docker.getContainer(handle.id).inspect()).rejects.toMatchObject({ statusCode: 404 });
    await executor.cleanup(handle);
  });

  it('after a restart, reattaches a running container, reports a vanished one and leaves strangers alone', async () => {
    // The survivor runs until released below, so it is running at the restart whatever the machine's pace.
    const survivor = await executor.start(dockerJob(['sh', '-c', untilReleased('echo before', 'echo after')]));
    const vanished = await executor.start(dockerJob(['sleep', '30']));
    const stranger = await executor.start(dockerJob(['true']));
    await docker.getContainer(vanished.id).remove({ force: true });
    const neverRan = randomUUID();
    await waitFor('the survivor to print before the restart', async () => text(await collect(executor, survivor), 'stdout') === 'before\n');

    // A new process of the same node: it knows nothing but what the engine has.
    const restarted = new DockerExecutor({ docker, nodeId, logsDir: join(dir, 'logs-after-restart'), stopGraceSeconds: 1 });
    const report = await restarted.reconcile([survivor.job_id, vanished.job_id, neverRan]);
    expect(report.reattached).toEqual([{ handle: survivor, state: 'running' }]);
    expect(report.missing).toEqual(
      expect.arrayContaining([
        { job_id: vanished.job_id, reason: 'its container no longer exists' },
        { job_id: neverRan, reason: 'its container no longer exists' },
      ]),
    );
    expect(report.missing).toHaveLength(2);
    expect(report.orphans).toEqual([stranger]);

    await release(survivor.id);
    expect(await restarted.wait(survivor)).toEqual({ exit_code: 0, oom_killed: false });
    // The log is whole, including what was printed before the restart.
    expect(text(await collect(restarted, survivor), 'stdout')).toBe('before\nafter\n');
    await restarted.cleanup(survivor);
    await restarted.cleanup(stranger);
    // Nothing left to stop: cancelling a vanished container is not an error.
    await restarted.cancel(vanished, 'cancelled by user');
    await executor.cleanup(vanished);
  });

  it("runs another node's job with no network but loopback, and a local job with the engine's network", async () => {
    const interfaces = async (job: ReturnType<typeof dockerJob>) => {
      const handle = await executor.start(job);
      const info = await docker.getContainer(handle.id).inspect();
      expect(await executor.wait(handle)).toEqual({ exit_code: 0, oom_killed: false });
      const chunks = await collect(executor, handle);
      const names = text(chunks, 'stdout')
        .split('\n')
        .map((line) => /^\s*([^:\s]+):/.exec(line)?.[1])
        .filter((n): n is string => n !== undefined);
      await executor.cleanup(handle);
      // What was captured, for an assertion that fails. stdout once came back empty from a run that
      // exited 0: the engine's follow ended before the output (read again since, container-output.ts).
      const output = `container ${handle.id} printed ${JSON.stringify(chunks)}`;
      return { info, names, output };
    };
    // /proc/net/dev lists the interfaces the container's network namespace has.
    const remote = dockerJob(['cat', '/proc/net/dev']);
    remote.requester = '12D3KooWRequesterRequesterRequesterRequesterReque';
    const isolated = await interfaces(remote);
    expect(isolated.info.HostConfig).toMatchObject({ NetworkMode: 'none', CapDrop: ['ALL'], SecurityOpt: ['no-new-privileges'] });
    expect(isolated.names, isolated.output).toEqual(['lo']);
    const local = await interfaces(dockerJob(['cat', '/proc/net/dev']));
    expect(local.info.HostConfig.NetworkMode).not.toBe('none');
    expect(local.info.HostConfig.CapDrop).toEqual(['ALL']);
    expect(local.names, local.output).toContain('eth0');
  });

  it('runs as the configured user on a read-only root with a writable /tmp', async () => {
    const hardened = new DockerExecutor({ docker, nodeId, logsDir: join(dir, 'logs'), stopGraceSeconds: 1, limits: { user: '65534:65534', readOnlyRoot: true } });
    const job = dockerJob(['sh', '-c', 'echo x > /tmp/ok && cat /tmp/ok; echo y > /etc/written']);
    const handle = await hardened.start(job);
    expect(await hardened.wait(handle)).toMatchObject({ exit_code: 1 });
    const logs = await collect(hardened, handle);
    expect(text(logs, 'stdout')).toBe('x\n');
    expect(text(logs, 'stderr')).toMatch(/Read-only file system/);
    expect((await docker.getContainer(handle.id).inspect()).Config.User).toBe('65534:65534');
    await hardened.cleanup(handle);
  });

  it('fails to start a command the image lacks, says why in the log and leaves no container', async () => {
    const job = dockerJob(['no-such-program']);
    await expect(executor.start(job)).rejects.toThrow(/could not start: .*no-such-program/);
    const handle = { executor: 'docker', job_id: job.id, id: 'none' };
    expect(text(await collect(executor, handle), 'stderr')).toMatch(/^\[dms\] job .* could not start/);
    expect(await docker.listContainers({ all: true, filters: { label: [`${JOB_LABEL}=${job.id}`] } })).toEqual([]);
  });

  it('stops a job whose log cannot be made before it runs, and leaves no container', async () => {
    // Made while the engine makes the container: the container it made is taken back.
    await writeFile(join(dir, 'a-file'), '');
    const unlogged = new DockerExecutor({ docker, nodeId, logsDir: join(dir, 'a-file', 'logs'), stopGraceSeconds: 1 });
    const job = dockerJob(['echo', 'never']);
    await expect(unlogged.start(job)).rejects.toThrow(/could not start: .*(ENOTDIR|not a directory)/);
    expect(await docker.listContainers({ all: true, filters: { label: [`${JOB_LABEL}=${job.id}`] } })).toEqual([]);
  });

  it('gives back what it wrote of a job\'s inputs when the job does not start', async () => {
    const released: string[] = [];
    const inputs = { prepare: async () => ({ binds: [], volumes: [] }), release: async (id: string) => void released.push(id) } as unknown as InputMounter;
    const withInputs = new DockerExecutor({ docker, nodeId, logsDir: join(dir, 'logs-inputs'), stopGraceSeconds: 1, inputs });
    const job = { ...dockerJob(['no-such-program']), inputs: [{ source: 'volume:none', path: '/in' }] } as Job;
    await expect(withInputs.start(job)).rejects.toThrow(/could not start: .*no-such-program/);
    expect(released).toEqual([job.id]);
  });

  it('stops a container that writes more than it may, after a restart too, by the bound it was made with', async () => {
    const writes = ['sh', '-c', 'echo started; dd if=/dev/zero of=/big bs=1048576 count=32 2>/dev/null; sleep 60'];
    // The first process measures too seldom to see it: the one after the restart does, by the container's label.
    const before = new DockerExecutor({ docker, nodeId, logsDir: join(dir, 'logs-storage'), stopGraceSeconds: 1, storageCheckMs: 3_600_000, limits: { ...DEFAULT_CONTAINER_LIMITS, storageBytes: 8 * MiB } });
    const handle = await before.start(dockerJob(writes));
    await waitFor('the job to start writing', async () => text(await collect(before, handle), 'stdout') === 'started\n');
    const after = new DockerExecutor({ docker, nodeId, logsDir: join(dir, 'logs-storage-after'), stopGraceSeconds: 1, storageCheckMs: 100 });
    expect(await after.wait(handle)).toMatchObject({ oom_killed: false, error: expect.stringMatching(/^killed: wrote \d+(\.\d+)? MiB into its container, more than the 8 MiB it may/) });
    await after.cleanup(handle);
  });

  it('stops a container whose writable volume holds more than its size, after a restart too, by the volumes its labels name', async () => {
    const volume = { name: 'v', dir: join(dir, 'volume-v'), size: 2 * MiB };
    mkdirSync(volume.dir, { recursive: true });
    const inputs = { prepare: async () => ({ binds: [`${volume.dir}:/v`], volumes: [volume] }), release: async () => undefined } as unknown as InputMounter;
    const before = new DockerExecutor({ docker, nodeId, logsDir: join(dir, 'logs-volume'), stopGraceSeconds: 1, storageCheckMs: 3_600_000, inputs });
    const job = { ...dockerJob(['sh', '-c', 'echo started; dd if=/dev/zero of=/v/big bs=1048576 count=8 2>/dev/null; sleep 60']), inputs: [{ source: 'volume:v', path: '/v', writable: true }] } as Job;
    const handle = await before.start(job);
    await waitFor('the job to start writing', async () => text(await collect(before, handle), 'stdout') === 'started\n');
    const after = new DockerExecutor({ docker, nodeId, logsDir: join(dir, 'logs-volume-after'), stopGraceSeconds: 1, storageCheckMs: 100 });
    expect(await after.wait(handle)).toMatchObject({ error: expect.stringMatching(/^killed: wrote into volume v until it held more than its size, 2 MiB/) });
    await after.cleanup(handle);
  });

  it('asks the engine for an image once, and pulls one removed since a job of it ran here', async () => {
    const repo = `dms-test/known-${randomUUID().slice(0, 8)}`;
    const image = `${repo}:latest`;
    await docker.getImage(IMAGE).tag({ repo, tag: 'latest' });
    const looked: string[] = [];
    const getImage = docker.getImage.bind(docker);
    docker.getImage = (name: string) => (looked.push(name), getImage(name));
    const run = async () => {
      const handle = await executor.start(jobOf({ executor: 'docker', image, command: ['true'] }));
      expect(await executor.wait(handle)).toEqual({ exit_code: 0, oom_killed: false });
      await executor.cleanup(handle);
    };
    try {
      await run();
      await run();
      expect(looked.filter((n) => n === image)).toHaveLength(1);
      // Removed by hand: the create finds it missing, and the executor tries to pull it, as for a first job.
      await getImage(image).remove();
      const job = jobOf({ executor: 'docker', image, command: ['true'] });
      await expect(executor.start(job)).rejects.toThrow(`image ${image} is not present and could not be pulled`);
      expect(await docker.listContainers({ all: true, filters: { label: [`${JOB_LABEL}=${job.id}`] } })).toEqual([]);
      await getImage(IMAGE).tag({ repo, tag: 'latest' });
      await run();
      // The first job, the create that found it missing, and the job after it was tagged again.
      expect(looked.filter((n) => n === image)).toHaveLength(3);
    } finally {
      docker.getImage = getImage;
      await docker.getImage(image).remove().catch(() => undefined);
    }
  });

  it('fails with a clear error naming an image that is neither present nor pullable', async () => {
    const image = `dms-test/not-there-${randomUUID().slice(0, 8)}:latest`;
    const progress: unknown[] = [];
    const job = jobOf({ executor: 'docker', image, command: ['true'] });
    const e = await executor.start(job, { onProgress: (p) => progress.push(p) }).catch((e: unknown) => e as Error);
    expect(e).toBeInstanceOf(Error);
    expect((e as Error).message).toContain(`image ${image} is not present and could not be pulled`);
    const left = await docker.listContainers({ all: true, filters: { label: [`${JOB_LABEL}=${job.id}`] } });
    expect(left).toEqual([]);
  });
});
