/**
 * `dms jobs port-forward`: the built CLI asks the node for a forward, prints where it listens,
 * and on SIGINT stops it (the listener is the node's: a CLI that left it behind would leak a
 * bound port on the node). Here the job runs on the node itself, so it is connected to directly.
 */
import { spawn } from 'node:child_process';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { dockerForTests, TEST_IMAGE } from '../helpers/docker.js';
import { waitFor } from '../helpers/network.js';
import { type NodeProcess, removeHome, startNode } from '../helpers/node.js';
import { assertBuilt, CLI, cleanEnv } from './helpers.js';

const { docker, problem } = await dockerForTests('port-forward CLI test');
const PAGE = 'forwarded by the cli';

describe.skipIf(problem !== null)('dms jobs port-forward', { timeout: 90_000 }, () => {
  let node: NodeProcess;
  let jobId = '';

  beforeAll(async () => {
    assertBuilt();
    node = await startNode();
    const r = await fetch(`${node.url}/api/v1/jobs`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({
        name: 'httpd',
        image: TEST_IMAGE,
        command: ['sh', '-c', `mkdir -p /tmp/www && echo "${PAGE}" > /tmp/www/index.html && exec httpd -f -p 8080 -h /tmp/www`],
        resources: { cpu: 0.2, memory: '32MiB' },
        ports: [8080],
        placement: { local: true },
      }),
    });
    expect(r.status).toBe(201);
    jobId = ((await r.json()) as { id: string }).id;
    await waitFor('the job running', async () => ((await (await fetch(`${node.url}/api/v1/jobs/${jobId}`)).json()) as { status: string }).status === 'running', { timeoutMs: 40_000 });
  }, 80_000);

  afterAll(async () => {
    const left = await docker.listContainers({ all: true, filters: { label: [`dms.node=${node?.peerId}`] } });
    await Promise.all(left.map((c) => docker.getContainer(c.Id).remove({ force: true }).catch(() => undefined)));
    await node?.stop();
    if (node) removeHome(node.home);
  });

  it('prints the local address, serves the job port there, and stops the forward on Ctrl-C', async () => {
    const child = spawn(process.execPath, [CLI, '--home', node.home, 'jobs', 'port-forward', jobId.slice(0, 8), '8080'], { env: cleanEnv(), stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    const exited = new Promise<number | null>((r) => child.once('exit', (code) => r(code)));
    try {
      const local = await waitFor('the address printed', () => /forwarding (127\.0\.0\.1:\d+) -> job/.exec(stdout)?.[1] ?? (stderr ? Promise.reject(new Error(stderr)) : undefined), { timeoutMs: 15_000 });
      const page = await waitFor('the page', async () => {
        const r = await fetch(`http://${local}/`, { signal: AbortSignal.timeout(3_000) }).catch(() => undefined);
        return r?.status === 200 ? r.text() : undefined;
      }, { timeoutMs: 20_000, intervalMs: 250 });
      expect(page.trim()).toBe(PAGE);
      expect(((await (await fetch(`${node.url}/api/v1/jobs/${jobId}/ports`)).json()) as { forwards: unknown[] }).forwards).toHaveLength(1);
      child.kill('SIGINT');
      expect(await Promise.race([exited, new Promise((r) => setTimeout(() => r('still running'), 10_000))])).toBe(0);
      expect(((await (await fetch(`${node.url}/api/v1/jobs/${jobId}/ports`)).json()) as { forwards: unknown[] }).forwards).toEqual([]);
      await expect(fetch(`http://${local}/`, { signal: AbortSignal.timeout(3_000) })).rejects.toThrow();
    } finally {
      child.kill('SIGKILL');
    }
  });

  it('refuses a port the job does not declare, exiting 1 with the reason', async () => {
    const child = spawn(process.execPath, [CLI, '--home', node.home, 'jobs', 'port-forward', jobId, '9090'], { env: cleanEnv(), stdio: ['ignore', 'pipe', 'pipe'] });
    let stderr = '';
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    const code = await new Promise<number | null>((r) => child.once('exit', (c) => r(c)));
    expect(code).toBe(1);
    expect(stderr).toMatch(/does not declare port 9090/);
  });
});
