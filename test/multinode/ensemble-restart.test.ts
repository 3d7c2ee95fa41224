/**
 * An ensemble outlives a restart of the node it was submitted on: the node picks it up from its
 * parts' jobs, follows the part running on another node again, and can still cancel it there.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { listenAddr, startCluster, stopCluster, waitFor } from '../helpers/network.js';
import { type LocalNode, startLocalNode } from '../helpers/local-node.js';
import { rest } from '../helpers/rest.js';

type Ensemble = { id: string; status: string; reason: string | null; parts: { part: string; job_id: string; node: string | null; status: string }[] };

let a: LocalNode;
let b: LocalNode;

beforeAll(async () => {
  [a, b] = await startCluster(2, { start: startLocalNode });
  expect((await rest(b, 'PUT', '/api/v1/device/config', { onboarded: { cpu: 1, memory: '1GiB' } })).status).toBe(200);
}, 120_000);
afterAll(() => stopCluster([a, b]));

describe('an ensemble across a restart of its requester', { timeout: 90_000 }, () => {
  it('is picked up running, following its part on the other node, and can be cancelled', async () => {
    const made = await rest(a, 'POST', '/api/v1/ensembles', {
      name: 'lasting',
      parts: { svc: { image: 'none', executor: 'null', kind: 'service', ports: [7000], resources: { cpu: 0.25, memory: '16MiB' }, environment: { DMS_NULL_DURATION_MS: '120000' }, placement: { node: b.peerId } } },
    });
    expect(made.status).toBe(201);
    const id = (made.json as Ensemble).id;
    await waitFor('the ensemble running', async () => ((await rest(a, 'GET', `/api/v1/ensembles/${id}`)).json as Ensemble).status === 'running' || undefined, { timeoutMs: 20_000 });
    const home = a.home;
    await a.stop();
    a = await startLocalNode({ home, env: { DMS_NETWORK_BOOTSTRAP_PEERS: listenAddr(b) } });
    const again = (await rest(a, 'GET', `/api/v1/ensembles/${id}`)).json as Ensemble;
    expect(again.status).toBe('running');
    expect(again.parts[0]).toMatchObject({ part: 'svc', node: b.peerId, status: 'running' });
    const cancelled = (await rest(a, 'DELETE', `/api/v1/ensembles/${id}`)).json as Ensemble;
    expect(cancelled).toMatchObject({ status: 'failed', reason: 'cancelled' });
    await waitFor("the part's job ended on b too", async () => {
      const jobs = (await rest(b, 'GET', '/api/v1/jobs')).json as { id: string; status: string }[];
      return jobs.find((j) => j.id === again.parts[0]!.job_id)?.status === 'failed' || undefined;
    }, { timeoutMs: 20_000 });
  });
});
