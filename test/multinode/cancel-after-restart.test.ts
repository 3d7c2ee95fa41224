/**
 * The cancel a provider missed (./cancel-unreachable.test.ts) survives its requester's crash.
 * The requester asked the cancel again from memory only: killed (or merely restarted) before
 * its provider was back, it forgot it, and the provider, back, ran the container on for good
 * and held its share, though the cancel had been answered 200. Both nodes are processes here,
 * each killed with kill -9, the requester after the cancel was answered.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { dockerForTests, removeContainersOf, TEST_IMAGE } from '../helpers/docker.js';
import { freePort, listenAddr, stopCluster, waitFor } from '../helpers/network.js';
import { type NodeProcess, startNode } from '../helpers/node.js';
import { rest } from '../helpers/rest.js';

const { docker, problem } = await dockerForTests('a cancel the requester must remember across its restart');

type Job = { id: string; status: string; node: string | null; error: string | null };

describe.skipIf(problem !== null)('a job cancelled while its provider is unreachable, its requester restarted', { timeout: 120_000 }, () => {
  let r: NodeProcess;
  let p: NodeProcess;
  let pListen: string;
  const rConfig = { deployment: { lost_after_ms: 2_000 } };

  beforeAll(async () => {
    pListen = `/ip4/127.0.0.1/tcp/${await freePort()}`;
    r = await startNode({ config: rConfig, timeoutMs: 45_000 });
    p = await startNode({ timeoutMs: 45_000, env: { DMS_NETWORK_LISTEN_ADDRESSES: pListen, DMS_NETWORK_BOOTSTRAP_PEERS: listenAddr(r) } });
    expect((await rest(p, 'PUT', '/api/v1/device/config', { onboarded: { cpu: 1, memory: '1GiB' } })).status).toBe(200);
  }, 120_000);

  afterAll(async () => {
    await removeContainersOf(docker, p);
    await stopCluster([r, p]);
  });

  const containersOf = async (jobId: string) => (await docker.listContainers({ filters: { label: [`dms.job=${jobId}`] } })).length;

  it('is stopped on the provider once it is back, though the requester was killed meanwhile', async () => {
    const made = await rest(r, 'POST', '/api/v1/jobs', { name: 'remembered', image: TEST_IMAGE, command: ['sleep', '600'], resources: { cpu: 0.1, memory: '32MiB' }, placement: { node: p.peerId } });
    expect(made.status, JSON.stringify(made.json)).toBe(201);
    const id = (made.json as Job).id;
    await waitFor('the job running on the provider', async () => ((await rest(r, 'GET', `/api/v1/jobs/${id}`)).json as Job).status === 'running' || undefined, { timeoutMs: 20_000 });
    await waitFor('its container running', async () => (await containersOf(id)) === 1 || undefined, { timeoutMs: 20_000 });

    await p.kill();
    expect(await containersOf(id)).toBe(1);
    const cancelled = await rest(r, 'DELETE', `/api/v1/jobs/${id}`);
    expect(cancelled.status).toBe(200);
    expect((cancelled.json as Job).status).toBe('failed');

    // Answered: from here on the cancel is the requester's to keep, whatever becomes of its process.
    await r.kill();
    const rHome = r.home;
    r = await startNode({ home: rHome, timeoutMs: 45_000 });
    const pHome = p.home;
    p = await startNode({ home: pHome, timeoutMs: 45_000, env: { DMS_NETWORK_LISTEN_ADDRESSES: pListen, DMS_NETWORK_BOOTSTRAP_PEERS: listenAddr(r) } });

    await waitFor('the job stopped on the provider, told of the cancel by the restarted requester', async () => {
      const there = ((await rest(p, 'GET', '/api/v1/jobs')).json as Job[]).find((j) => j.id === id);
      return there?.status === 'failed' && (await containersOf(id)) === 0 ? there : undefined;
    }, {
      timeoutMs: 30_000,
      explain: async () => {
        const there = ((await rest(p, 'GET', '/api/v1/jobs')).json as Job[]).find((j) => j.id === id);
        return `the provider's record: ${there ? there.status : 'none'}; containers of the job: ${await containersOf(id)}`;
      },
    });
  });
});
