// A job's output directories exist when it starts (actors/executors/output-dirs.ts), against a
// real Docker engine: `dms run -o out:/outputs busybox sh -c 'echo hi > /outputs/x'` failed
// "can't create '/outputs/x': No such file or directory" (found running the CLI as a user).
import { randomUUID } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { dockerForTests } from '../helpers/docker.js';
import { NODE_LABEL } from '../../actors/executors/container-spec.js';
import { DockerExecutor } from '../../actors/executors/docker.js';
import type { InputMounter } from '../../actors/executors/inputs.js';
import type { Job } from '../../behaviors/jobs/schema.js';
import { collect, jobOf, text } from './helpers.js';

const { docker, problem } = await dockerForTests('output directory tests');

describe.skipIf(problem !== null)("a job's output directories", { timeout: 30_000 }, () => {
  const nodeId = `test-${randomUUID()}`;
  let dir: string;
  let executor: DockerExecutor;

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'dms-output-dirs-'));
    executor = new DockerExecutor({ docker, nodeId, logsDir: join(dir, 'logs'), stopGraceSeconds: 1 });
  });

  afterAll(async () => {
    const left = await docker.listContainers({ all: true, filters: { label: [`${NODE_LABEL}=${nodeId}`] } });
    await Promise.all(left.map((c) => docker.getContainer(c.Id).remove({ force: true }).catch(() => undefined)));
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  const run = async (outputs: { name: string; path: string }[], script: string) => {
    const handle = await executor.start(jobOf({ executor: 'docker', command: ['sh', '-c', script], outputs }));
    const result = await executor.wait(handle);
    const logs = await collect(executor, handle);
    await executor.cleanup(handle);
    return { result, stdout: text(logs, 'stdout'), stderr: text(logs, 'stderr') };
  };

  it('are made, empty and writable by any user, with the directories above them; a file output gets the directory it is in', async () => {
    const { result, stdout, stderr } = await run(
      [{ name: 'out', path: '/outputs' }, { name: 'deep', path: '/deep/er/out' }, { name: 'model', path: '/models/model.bin' }],
      'ls -A /outputs | wc -l; echo hi > /outputs/x && echo deep > /deep/er/out/y && echo m > /models/model.bin && stat -c "%a %u" /outputs /deep/er/out /deep /models',
    );
    expect({ result, stderr }).toEqual({ result: { exit_code: 0, oom_killed: false }, stderr: '' });
    expect(stdout.trim().split('\n')).toEqual(['0', '777 0', '777 0', '755 0', '777 0']);
  });

  it('one that cannot be made is left to the job, and the others are made', async () => {
    // Under a read-only mount the engine refuses it; the job still starts, and /zzz is there for it.
    const inputs = { prepare: async () => ({ binds: [`${dir}:/ro:ro`], volumes: [] }), release: async () => undefined } as unknown as InputMounter;
    const withInputs = new DockerExecutor({ docker, nodeId, logsDir: join(dir, 'logs-inputs'), stopGraceSeconds: 1, inputs });
    const job = jobOf({ executor: 'docker', command: ['sh', '-c', 'test -d /zzz && echo made; test -e /ro/out || echo absent'], outputs: [{ name: 'ro', path: '/ro/out' }, { name: 'z', path: '/zzz' }] });
    const handle = await withInputs.start({ ...job, inputs: [{ source: 'volume:none', path: '/ro' }] } as Job);
    expect(await withInputs.wait(handle)).toEqual({ exit_code: 0, oom_killed: false });
    expect(text(await collect(withInputs, handle), 'stdout').trim().split('\n')).toEqual(['made', 'absent']);
    await withInputs.cleanup(handle);
  });

  it("leave what the image has at a path as it is: a directory's mode, a file", async () => {
    // busybox's /tmp is 1777 and /bin/sh a file; neither is made again nor changed.
    const { result, stdout } = await run([{ name: 'tmp', path: '/tmp' }, { name: 'sh', path: '/bin/sh' }, { name: 'etc', path: '/etc' }], 'stat -c "%a %F" /tmp /etc; test -f /bin/sh && echo file');
    expect(result.exit_code).toBe(0);
    expect(stdout.trim().split('\n')).toEqual(['1777 directory', '755 directory', 'file']);
  });
});
