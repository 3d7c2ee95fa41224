/**
 * A Docker job placed on another node: it runs in a real container on the provider, and its
 * output is read on the requester as if it had run there; a stranger's job runs there without
 * the provider's network.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DmsClient } from '../../client/client.js';
import { dockerForTests, TEST_IMAGE } from '../helpers/docker.js';
import { jobOnNodes, startCluster, stopCluster, waitFor } from '../helpers/network.js';
import type { NodeProcess } from '../helpers/node.js';

const { docker, problem } = await dockerForTests('Docker placement test');

/** The test's own bound: every wait in it ends before, so a wait that runs out says why, not vitest. */
const TEST_MS = 120_000;

describe.skipIf(problem !== null)('a Docker job on another node', { timeout: TEST_MS }, () => {
  let nodes: NodeProcess[] = [];
  /** When the running test must have ended its waits (set at its start). */
  let testEnds = 0;
  /** At most `ms`, and never past the test's end less the time to write the message. */
  const within = (ms: number) => Math.max(1_000, Math.min(ms, testEnds - 10_000 - Date.now()));

  /** Both nodes' record and history of the job, and the engine's containers of it. */
  const explain = async (id: string): Promise<string> => {
    const containers = await docker
      .listContainers({ all: true, filters: { label: [`dms.job=${id}`] } })
      .then((cs) => JSON.stringify(cs.map((c) => ({ id: c.Id.slice(0, 12), node: c.Labels['dms.node'], state: c.State, status: c.Status }))), (e: unknown) => String(e));
    return `${await jobOnNodes(nodes, id)}\ncontainers of the job: ${containers}`;
  };
  /** The job once it ended on `on`; a wait that runs out names its state on both nodes. */
  const ended = (on: NodeProcess, id: string) =>
    waitFor(
      `job ${id} to end on the node it was submitted on`,
      async () => {
        const j = (await (await fetch(`${on.url}/api/v1/jobs/${id}`)).json()) as { status: string; node: string };
        return j.status === 'completed' || j.status === 'failed' ? j : undefined;
      },
      { timeoutMs: within(60_000), explain: () => explain(id) },
    );
  const completed = async (on: NodeProcess, id: string) => {
    const j = await ended(on, id);
    if (j.status !== 'completed') expect.fail(`job ${id} failed:\n${await explain(id)}`);
    return j;
  };

  beforeAll(async () => {
    // At debug level: the end of each node's log is in a timed-out wait's message (jobOnNodes).
    nodes = await startCluster(2, { node: () => ({ args: ['--log-level', 'debug'] }) });
    const [n1, n2] = nodes;
    const put = await fetch(`${n2.url}/api/v1/device/config`, {
      method: 'PUT',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ onboarded: { cpu: 1, memory: '1GiB' } }),
    });
    expect(put.status).toBe(200);
    await waitFor('node 1 connected to node 2', async () => (await new DmsClient({ url: n1.url, timeoutMs: 5_000 }).peers()).includes(n2.peerId), { timeoutMs: 30_000 });
  }, 90_000);

  afterAll(async () => {
    for (const n of nodes) {
      const left = await docker.listContainers({ all: true, filters: { label: [`dms.node=${n.peerId}`] } });
      await Promise.all(left.map((c) => docker.getContainer(c.Id).remove({ force: true }).catch(() => undefined)));
    }
    await stopCluster(nodes);
  });

  it('runs in a container on node 2 and shows its output on node 1', async () => {
    testEnds = Date.now() + TEST_MS;
    const [n1, n2] = nodes;
    const res = await fetch(`${n1.url}/api/v1/jobs`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({
        name: 'remote-echo',
        image: TEST_IMAGE,
        command: 'echo hello from $(hostname | cut -c1-3)x; echo to stderr >&2',
        resources: { cpu: 0.5, memory: '64MiB' },
        placement: { node: n2.peerId },
      }),
    });
    expect(res.status).toBe(201);
    const { id } = (await res.json()) as { id: string };
    const done = await completed(n1, id);
    expect(done.node).toBe(n2.peerId);
    const logs = (await (await fetch(`${n1.url}/api/v1/jobs/${id}/logs`)).json()) as { chunks: { stream: string; data: string }[] };
    expect(logs.chunks.filter((c) => c.stream === 'stdout').map((c) => c.data).join('')).toMatch(/^hello from \w{3}x\n$/);
    expect(logs.chunks.filter((c) => c.stream === 'stderr').map((c) => c.data).join('')).toBe('to stderr\n');
    // The container ran on node 2's engine, labelled with node 2's peer id, and is gone once the job ended.
    await waitFor('its container removed', async () => (await docker.listContainers({ all: true, filters: { label: [`dms.job=${id}`] } })).length === 0, { timeoutMs: within(20_000), explain: () => explain(id) });
    const usage = (await (await fetch(`${n2.url}/api/v1/resources/usage`)).json()) as { allocated: { cpu: { cores: number } } };
    expect(usage.allocated.cpu.cores).toBe(0);
  });

  it("runs another node's job with no network (only loopback) and no capabilities; the provider's own job keeps the network", async () => {
    testEnds = Date.now() + TEST_MS;
    const [n1, n2] = nodes;
    // Prints its interfaces, then waits for SIGUSR1: the container is sure to be there to inspect.
    // The shell is the container's PID 1, which the kernel spares a signal it has no handler for:
    // a SIGUSR1 sent before the trap is set is lost and the job never ends. So it is sent only once
    // the output is in, which the shell writes after setting the trap.
    const command = `trap 'go=1' USR1; cat /proc/net/dev; while [ -z "$go" ]; do sleep 0.1; done`;
    const stdoutOf = async (on: NodeProcess, id: string) => {
      const logs = (await (await fetch(`${on.url}/api/v1/jobs/${id}/logs`)).json()) as { chunks: { stream: string; data: string }[] };
      return logs.chunks.filter((c) => c.stream === 'stdout').map((c) => c.data).join('');
    };
    const run = async (on: NodeProcess, placement: object) => {
      const res = await fetch(`${on.url}/api/v1/jobs`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ name: 'net', image: TEST_IMAGE, command, resources: { cpu: 0.1, memory: '16MiB' }, placement }),
      });
      expect(res.status).toBe(201);
      const { id } = (await res.json()) as { id: string };
      const [container] = await waitFor(`the container of job ${id}`, async () => {
        const found = await docker.listContainers({ filters: { label: [`dms.job=${id}`] } });
        return found.length > 0 ? found : undefined;
      }, { timeoutMs: within(60_000), explain: () => explain(id) });
      const info = await docker.getContainer(container.Id).inspect();
      await waitFor(`the output of job ${id} (its trap is set)`, async () => (await stdoutOf(on, id)) !== '', { timeoutMs: within(30_000), explain: () => explain(id) });
      await docker.getContainer(container.Id).kill({ signal: 'SIGUSR1' });
      await completed(on, id);
      const out = await stdoutOf(on, id);
      const interfaces = [...out.matchAll(/^\s*([^:\s|]+):/gm)].map((m) => m[1]);
      return { info, interfaces, labels: container.Labels };
    };

    const remote = await run(n1, { node: n2.peerId });
    expect(remote.labels['dms.node']).toBe(n2.peerId);
    expect(remote.info.HostConfig).toMatchObject({ NetworkMode: 'none', CapDrop: ['ALL'], SecurityOpt: ['no-new-privileges'], PidsLimit: 1024 });
    expect(remote.interfaces).toEqual(['lo']);

    const own = await run(n2, { local: true });
    expect(own.labels['dms.node']).toBe(n2.peerId);
    expect(own.info.HostConfig.NetworkMode).not.toBe('none');
    expect(own.info.HostConfig.CapDrop).toEqual(['ALL']);
    expect(own.interfaces).toContain('eth0');
  });
});
