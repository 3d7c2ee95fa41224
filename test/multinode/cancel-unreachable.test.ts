/**
 * A job cancelled on its requester while its provider is unreachable fails there once the
 * provider has been silent for `deployment.lost_after_ms`; the provider, back, picks up the
 * container it kept running. Seen against three node processes: an ensemble's httpd part,
 * its provider killed with kill -9, the ensemble cancelled, the provider started again: the
 * container served on for good and held its share, since nobody told the provider of the cancel
 * again. The requester now asks the cancel again until the provider confirms it.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { dockerForTests, removeContainersOf, TEST_IMAGE } from '../helpers/docker.js';
import { freePort, listenAddr, startCluster, stopCluster, waitFor } from '../helpers/network.js';
import { type LocalNode, startLocalNode } from '../helpers/local-node.js';
import { rest } from '../helpers/rest.js';

const { docker, problem } = await dockerForTests('a cancel the provider missed');

type Job = { id: string; status: string; node: string | null; error: string | null };

describe.skipIf(problem !== null)('a job cancelled while its provider is unreachable', { timeout: 90_000 }, () => {
  let a: LocalNode;
  let b: LocalNode;
  let bListen: string;

  beforeAll(async () => {
    bListen = `/ip4/127.0.0.1/tcp/${await freePort()}`;
    [a, b] = await startCluster(2, {
      start: startLocalNode,
      node: (i) => (i === 0 ? { config: { deployment: { lost_after_ms: 2_000 } } } : { env: { DMS_NETWORK_LISTEN_ADDRESSES: bListen } }),
    });
    expect((await rest(b, 'PUT', '/api/v1/device/config', { onboarded: { cpu: 1, memory: '1GiB' } })).status).toBe(200);
  }, 120_000);

  afterAll(async () => {
    await removeContainersOf(docker, b);
    await stopCluster([a, b]);
  });

  const containersOf = async (jobId: string) => (await docker.listContainers({ filters: { label: [`dms.job=${jobId}`] } })).length;

  it('is stopped on the provider once it is back', async () => {
    const made = await rest(a, 'POST', '/api/v1/jobs', { name: 'missed', image: TEST_IMAGE, command: ['sleep', '600'], resources: { cpu: 0.1, memory: '32MiB' }, placement: { node: b.peerId } });
    expect(made.status, JSON.stringify(made.json)).toBe(201);
    const id = (made.json as Job).id;
    await waitFor('the job running on b', async () => ((await rest(a, 'GET', `/api/v1/jobs/${id}`)).json as Job).status === 'running' || undefined, { timeoutMs: 20_000 });

    await waitFor('its container running', async () => (await containersOf(id)) === 1 || undefined, { timeoutMs: 20_000 });
    const home = b.home;
    await b.stop();
    expect(await containersOf(id)).toBe(1);
    const cancelled = (await rest(a, 'DELETE', `/api/v1/jobs/${id}`)).json as Job;
    expect(cancelled.status).toBe('failed');

    b = await startLocalNode({ home, env: { DMS_NETWORK_LISTEN_ADDRESSES: bListen, DMS_NETWORK_BOOTSTRAP_PEERS: listenAddr(a) } });
    await waitFor("the job stopped on b, told of the cancel again", async () => {
      const there = ((await rest(b, 'GET', '/api/v1/jobs')).json as Job[]).find((j) => j.id === id);
      return there?.status === 'failed' && (await containersOf(id)) === 0 ? there : undefined;
    }, { timeoutMs: 25_000 });
  });
});
