/**
 * A burst of placements on one provider. Found by driving two node processes with 32 callers:
 * the provider's deployment actor had every mailbox slot taken by a reserve awaiting a call (the
 * resource manager's lease, the orchestrator's accept), the replies to those calls queued in the
 * same mailbox behind newer reserves, and nothing moved until the calls timed out together. The
 * requester then saw its reserves unanswered, let them go, and placed the jobs again; the provider
 * counted the leases let go unstarted against it and refused it for a while: minutes for a
 * burst of jobs that take milliseconds each. The provider here runs with 4 slots an actor
 * (`actor.mailbox_concurrency`) so a dozen jobs are a burst.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Job } from '../../behaviors/jobs/schema.js';
import { DmsClient } from '../../client/client.js';
import { startCluster, stopCluster, waitFor } from '../helpers/network.js';
import type { NodeProcess } from '../helpers/node.js';
import { rest } from '../helpers/rest.js';

let requester: NodeProcess;
let provider: NodeProcess;

beforeAll(async () => {
  [requester, provider] = await startCluster(2, { node: (i) => (i === 1 ? { config: { actor: { mailbox_concurrency: 4 } } } : {}) });
  // The requester cannot hold the jobs itself: every one is placed on the provider.
  expect((await rest(requester, 'PUT', '/api/v1/device/config', { onboarded: { cpu: 0.04, memory: '64MiB' } })).status).toBe(200);
  expect((await rest(provider, 'PUT', '/api/v1/device/config', { onboarded: { cpu: 2, memory: '2GiB' } })).status).toBe(200);
  const client = new DmsClient({ url: requester.url, timeoutMs: 5_000 });
  await waitFor('the requester to see the provider', async () => (await client.peers()).includes(provider.peerId) || undefined);
}, 90_000);
afterAll(() => stopCluster([requester, provider]));

describe('a burst of jobs for one provider', () => {
  it('is placed and completed there at once, and the requester is never refused as a hoarder', async () => {
    const spec = { name: 'burst', image: 'none', executor: 'null', resources: { cpu: 0.05, memory: '8MiB' } };
    const ids = await Promise.all(
      Array.from({ length: 24 }, async () => {
        const res = await rest(requester, 'POST', '/api/v1/jobs', spec);
        expect(res.status).toBe(201);
        return (res.json as { id: string }).id;
      }),
    );
    // Each call the deadlock held waited 5 s, and a requester refused as a hoarder waits 30 s
    // and more; the burst itself takes well under a second.
    const jobs = await waitFor(
      'all 24 jobs completed',
      async () => {
        const all = await Promise.all(ids.map(async (id) => (await rest(requester, 'GET', `/api/v1/jobs/${id}`)).json as Job));
        return all.every((j) => j.status === 'completed') ? all : undefined;
      },
      { timeoutMs: 12_000 },
    );
    for (const job of jobs) {
      expect(job.node).toBe(provider.peerId);
      // Placed once: no reserve went unanswered, so nothing was placed again.
      expect(job.attempts.map((a) => a.outcome)).toEqual(['completed']);
    }
  }, 30_000);
});
