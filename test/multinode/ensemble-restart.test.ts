/**
 * An ensemble outlives a restart of the node it was submitted on: the node picks it up from its
 * parts' jobs, follows the part running on another node again, and can still cancel it there.
 * One the node stopped while making is failed, and the part jobs it had made end with it.
 */
import { randomUUID } from 'node:crypto';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { jobSpecOf } from '../../actors/ensembles/actor.js';
import { EnsembleSpecSchema } from '../../behaviors/ensembles/schema.js';
import { openStorage } from '../../storage/index.js';
import { tempHome } from '../helpers/node.js';
import { listenAddr, stopCluster, waitFor } from '../helpers/network.js';
import { type LocalNode, restartLocalNode, startLocalNode } from '../helpers/local-node.js';
import { rest } from '../helpers/rest.js';
import { sharingCluster } from '../helpers/sharing-cluster.js';

type Ensemble = { id: string; status: string; reason: string | null; parts: { part: string; job_id: string; node: string | null; status: string }[] };
type JobView = { id: string; status: string; error: string | null; node: string | null; attempts: unknown[] };

let a: LocalNode;
let b: LocalNode;

beforeAll(async () => void ([a, b] = await sharingCluster(2, { start: startLocalNode })), 120_000);
afterAll(() => stopCluster([a, b]));

describe('an ensemble across a restart of its requester', { timeout: 90_000 }, () => {
  it('is picked up running, following its part on the other node, and can be cancelled', async () => {
    const made = await rest(a, 'POST', '/api/v1/ensembles', {
      name: 'lasting',
      parts: { svc: { image: 'none', executor: 'null', kind: 'service', ports: [7000], resources: { cpu: 0.25, memory: '16MiB' }, environment: { DMS_NULL_DURATION_MS: '120000' }, placement: { node: b.peerId } } },
    });
    expect(made.status, JSON.stringify(made.json)).toBe(201);
    const id = (made.json as Ensemble).id;
    await waitFor('the ensemble running', async () => ((await rest(a, 'GET', `/api/v1/ensembles/${id}`)).json as Ensemble).status === 'running' || undefined, { timeoutMs: 20_000 });
    a = await restartLocalNode(a, { env: { DMS_NETWORK_BOOTSTRAP_PEERS: listenAddr(b) } });
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

describe('a part failed by the recovery of its node', { timeout: 90_000 }, () => {
  // Its failure is stored while the node starts, before the ensemble is driven again: the
  // ensemble must still apply the part's restart policy, as for a failure while it runs.
  it('is restarted per its policy', async () => {
    let node = await startLocalNode();
    try {
      const made = await rest(node, 'POST', '/api/v1/ensembles', {
        name: 'ctrlrec',
        parts: { srv: { image: 'dms-test/busybox:latest', executor: 'null', environment: { DMS_NULL_EXIT_CODE: '1', DMS_NULL_DURATION_MS: '15000' }, restart: { on: 'failure', max: 2 } } },
      });
      expect(made.status, JSON.stringify(made.json)).toBe(201);
      const id = (made.json as Ensemble).id;
      const first = await waitFor('the part running', async () => {
        const e = (await rest(node, 'GET', `/api/v1/ensembles/${id}`)).json as Ensemble;
        return e.parts[0]!.status === 'running' ? e.parts[0]!.job_id : undefined;
      }, { timeoutMs: 20_000 });
      node = await restartLocalNode(node);
      const again = await waitFor('the part given a new job', async () => {
        const e = (await rest(node, 'GET', `/api/v1/ensembles/${id}`)).json as Ensemble & { parts: { restarts: number }[] };
        // The new job is stored before the count of restarts: both are waited for.
        return e.parts[0]!.job_id !== first && e.parts[0]!.restarts === 1 ? e : undefined;
      }, { timeoutMs: 20_000 });
      expect(again.status).not.toBe('failed');
      expect(again.parts[0]).toMatchObject({ part: 'srv', restarts: 1 });
      const old = (await rest(node, 'GET', `/api/v1/jobs/${first}`)).json as { status: string; error: string | null };
      expect(old.status).toBe('failed');
    } finally {
      await node.stop();
    }
  });
});

describe('an ensemble its node stopped making', { timeout: 60_000 }, () => {
  // Its row is stored before its parts' jobs are made, one by one through the orchestrator: a
  // node that stopped in between left a live ensemble with some of its part jobs, pending and
  // held for it. The ensemble is failed at the next start; those jobs must end with it, not
  // wait for a placement that never comes.
  it('is failed at the next start, and the part jobs it had made end naming it, none placed or run', async () => {
    const home = tempHome();
    const spec = EnsembleSpecSchema.parse({
      name: 'halfmade',
      parts: Object.fromEntries(
        ['a', 'b', 'c'].map((p) => [p, { image: 'none', executor: 'null', kind: 'service', resources: { cpu: 0.1, memory: '16MiB' }, environment: { DMS_NULL_DURATION_MS: '120000' } }]),
      ),
    });
    const id = randomUUID();
    const storage = await openStorage(join(home, 'dms.sqlite'));
    const made: string[] = [];
    try {
      await storage.ensembles.create(id, spec);
      for (const part of ['a', 'b']) made.push((await storage.jobs.create(jobSpecOf(spec, part), { id: randomUUID(), ensemble: { id, part } })).id);
    } finally {
      await storage.close();
    }
    const node = await startLocalNode({ home });
    try {
      const e = (await rest(node, 'GET', `/api/v1/ensembles/${id}`)).json as Ensemble;
      expect(e).toMatchObject({ status: 'failed', reason: 'the node stopped while its parts were being made' });
      for (const jobId of made) {
        const job = await waitFor(`part job ${jobId} ended`, async () => {
          const j = (await rest(node, 'GET', `/api/v1/jobs/${jobId}`)).json as JobView;
          return j.status === 'pending' || j.status === 'running' ? undefined : j;
        }, { timeoutMs: 10_000 });
        expect(job.status).toBe('failed');
        expect(job.error).toContain(id);
        expect(job).toMatchObject({ node: null, attempts: [] });
      }
    } finally {
      await node.stop();
    }
  });
});
