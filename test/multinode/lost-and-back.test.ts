/**
 * A job whose provider was lost runs there again once that provider is back, when no other node
 * can take it. Found by killing a two-node network's only provider under a running job and
 * starting it again: the job went back to pending and waited for good, "waiting for a node: no
 * node can hold it now (…: failed this job before)", the provider bidding for it at every offer.
 * The node that lost a job is avoided while another node bids; when only it bids, it is asked
 * again at the next offer, the job's placements (`max_attempts`) bounding how often.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { freePort, listenAddr, startCluster, stopCluster, waitFor } from '../helpers/network.js';
import { type LocalNode, startLocalNode } from '../helpers/local-node.js';
import { rest } from '../helpers/rest.js';

type Job = { id: string; status: string; node: string | null; pending_reason: string | null };
type Events = { events: { from: string | null; to: string; reason: string }[] };

describe("a job whose only provider was lost and came back", { timeout: 90_000 }, () => {
  let a: LocalNode;
  let b: LocalNode;
  let bListen: string;
  const bEnv = () => ({ DMS_NETWORK_LISTEN_ADDRESSES: bListen });

  beforeAll(async () => {
    bListen = `/ip4/127.0.0.1/tcp/${await freePort()}`;
    [a, b] = await startCluster(2, {
      start: startLocalNode,
      node: (i) => (i === 0 ? { config: { deployment: { lost_after_ms: 2_000, offer_retry_ms: 200, max_offer_backoff_ms: 1_000 } } } : { env: bEnv() }),
    });
    expect((await rest(b, 'PUT', '/api/v1/device/config', { onboarded: { cpu: 1, memory: '1GiB' }, labels: { zone: 'b' } })).status).toBe(200);
  }, 120_000);

  afterAll(() => stopCluster([a, b]));

  const jobOnA = async (id: string) => (await rest(a, 'GET', `/api/v1/jobs/${id}`)).json as Job;

  it('is placed on it again, and runs there', async () => {
    const made = await rest(a, 'POST', '/api/v1/jobs', {
      name: 'long',
      image: 'none',
      executor: 'null',
      environment: { DMS_NULL_DURATION_MS: '600000' },
      resources: { cpu: 0.1, memory: '16MiB' },
      placement: { labels: { zone: 'b' }, max_attempts: 3 },
    });
    expect(made.status, JSON.stringify(made.json)).toBe(201);
    const id = (made.json as Job).id;
    await waitFor('the job running on b', async () => ((await jobOnA(id)).status === 'running' ? true : undefined), { timeoutMs: 20_000 });

    const home = b.home;
    await b.stop();
    await waitFor('the run on b lost, the job pending', async () => ((await jobOnA(id)).status === 'pending' ? true : undefined), { timeoutMs: 15_000 });

    b = await startLocalNode({ home, env: { ...bEnv(), DMS_NETWORK_BOOTSTRAP_PEERS: listenAddr(a) } });
    const again = await waitFor('the job running on b again', async () => {
      const j = await jobOnA(id);
      return j.status === 'running' ? j : undefined;
    }, { timeoutMs: 30_000 });
    expect(again.node).toBe(b.peerId);
    const { events } = (await rest(a, 'GET', `/api/v1/jobs/${id}/events`)).json as Events;
    expect(events.filter((e) => e.reason === `placed on node ${b.peerId}`)).toHaveLength(2);
    expect(events.some((e) => e.reason.includes('no other node bid, so those are asked again at its next offer'))).toBe(true);
    expect((await rest(a, 'DELETE', `/api/v1/jobs/${id}`)).status).toBe(200);
  });
});
