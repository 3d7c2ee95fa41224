// Every spec in examples/jobs/, submitted as a reader of the README would, with
// `dms jobs submit <file>` against a real node, and followed to the state it should reach.
// The busybox ones run in real containers (skipped without a Docker engine unless
// DMS_REQUIRE_DOCKER=1, like the other Docker tests); no registry is reachable here, so they
// run on the test image, a busybox too, in place of busybox:latest. The rest need no engine.
import { readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Job } from '../../behaviors/jobs/schema.js';
import { dockerForTests, TEST_IMAGE } from '../helpers/docker.js';
import { type NodeProcess, removeHome, runCli } from '../helpers/node.js';
import { MiB, Rest, startJobNode, until } from './helpers.js';

const EXAMPLES = fileURLToPath(new URL('../../examples/jobs/', import.meta.url));
const UUID = /[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}/;
const { docker, problem } = await dockerForTests('example job specs in Docker');

let node: NodeProcess;
let rest: Rest;
const dms = (...args: string[]) => runCli(['--home', node.home, ...args]);
const example = (file: string) => join(EXAMPLES, file);

/** The example with busybox:latest swapped for the local test image (a busybox as well). */
function onTestImage(file: string): string {
  const text = readFileSync(example(file), 'utf8');
  expect(text).toContain('image: busybox:latest\n');
  const path = join(node.home, file);
  writeFileSync(path, text.replace('image: busybox:latest\n', `image: ${TEST_IMAGE}\n`));
  return path;
}

const idIn = (stderr: string) => UUID.exec(stderr)![0];

beforeAll(async () => {
  node = await startJobNode();
  rest = new Rest(node.url);
});

afterAll(async () => {
  await node?.stop();
  if (node) {
    const left = await docker.listContainers({ all: true, filters: { label: [`dms.node=${node.peerId}`] } }).catch(() => []);
    await Promise.all(left.map((c) => docker.getContainer(c.Id).remove({ force: true }).catch(() => undefined)));
    removeHome(node.home);
  }
});

it('covers every example: a new spec in examples/jobs/ needs a case here', () => {
  const specs = readdirSync(EXAMPLES).filter((f) => f !== 'README.md').sort();
  expect(specs).toEqual(['dry-run.json', 'env.yaml', 'gpu.yaml', 'hello.yaml', 'python.yaml', 'timeout.yaml']);
  const readme = readFileSync(example('README.md'), 'utf8');
  for (const spec of specs) expect(readme).toContain(`\`${spec}\``);
});

describe('examples that need no container', () => {
  it('dry-run.json runs on the null executor and completes', async () => {
    const r = await dms('jobs', 'submit', example('dry-run.json'), '--follow');
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toBe('nothing ran: the null executor plays back what it is told\n');
    expect(await rest.job(idIn(r.stderr))).toMatchObject({ status: 'completed', resources: { cpu: { cores: 0.1 }, memory: { size: 16 * MiB } } });
  });

  it('python.yaml is accepted and stored as written; it waits while the node has no room, and is cancelled', async () => {
    // A share too small for it keeps it pending (its image cannot be pulled here: no registry).
    await rest.put('/api/v1/device/config', { onboarded: { cpu: 0.25, memory: '64MiB' } });
    try {
      const r = await dms('jobs', 'submit', example('python.yaml'), '--id-only');
      expect(r.code, r.stderr).toBe(0);
      const id = r.stdout.trim();
      const job = await until('a pending reason', async () => {
        const j = await rest.job(id);
        return j.pending_reason ? j : undefined;
      });
      expect(job).toMatchObject({
        name: 'python-primes',
        image: 'python:3.12-slim',
        executor: 'docker',
        status: 'pending',
        pending_reason: 'waiting for resources: not enough cpu: 0.5 cores asked, 0.25 cores free of 0.25 cores onboarded',
        resources: { cpu: { cores: 0.5 }, memory: { size: 256 * MiB }, storage: { size: 0 } },
      });
      expect(job.command.slice(0, 2)).toEqual(['python3', '-c']);
      expect(job.command[2]).toMatch(/^primes = \[n for n in range\(2, 100\).*\nprint\(f"\{len\(primes\)\} primes below 100: \{primes\}"\)\n$/s);
      const cancelled = await dms('jobs', 'cancel', id);
      expect(cancelled).toMatchObject({ code: 0, stdout: `job ${id}: failed (cancelled)\n` });
    } finally {
      await rest.put('/api/v1/device/config', { onboarded: null });
    }
  });

  it('gpu.yaml is refused at once on a node without GPUs, saying why', async () => {
    const { capacity } = (await rest.get('/api/v1/resources/usage')).body;
    const r = await dms('jobs', 'submit', example('gpu.yaml'), '--id-only');
    if (capacity.gpu) {
      // A machine with GPUs takes it; it is not ours to run here.
      expect(r.code, r.stderr).toBe(0);
      await dms('jobs', 'cancel', r.stdout.trim());
      return;
    }
    expect(r).toEqual({ code: 1, stdout: '', stderr: 'dms: needs 1 GPU; this node has none (no known node could hold it) (HTTP 409)\n' });
  });
});

describe.skipIf(problem !== null)('examples in Docker', () => {
  it('hello.yaml prints hello world and completes, with the default resources', async () => {
    const r = await dms('jobs', 'submit', onTestImage('hello.yaml'), '--follow');
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toBe('hello world\n');
    const job = await rest.job(idIn(r.stderr));
    expect(job).toMatchObject({ status: 'completed', exit_code: 0, command: ['sh', '-c', 'echo "hello world"'] });
    expect(job.resources).toEqual({ cpu: { cores: 1 }, memory: { size: 512 * MiB }, storage: { size: 0 } });
  });

  it('env.yaml passes its environment to the job', async () => {
    const r = await dms('jobs', 'submit', onTestImage('env.yaml'), '--follow');
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toBe('Hello, first-hour user\n');
    expect((await rest.job(idIn(r.stderr))).environment).toEqual({ GREETING: 'Hello', WHO: 'first-hour user' });
  });

  it('timeout.yaml is stopped after 3 s and fails saying so', async () => {
    const started = Date.now();
    const r = await dms('jobs', 'submit', onTestImage('timeout.yaml'), '--follow');
    expect(r.code).not.toBe(0);
    expect(Date.now() - started).toBeLessThan(120_000);
    const job: Job = await rest.job(idIn(r.stderr));
    expect(job).toMatchObject({ status: 'failed', error: 'timed out after 3 s', timeout_s: 3 });
    expect(r.stderr).toMatch(/timed out after 3 s\n$/);
  });
});
