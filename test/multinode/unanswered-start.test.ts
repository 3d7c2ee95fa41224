/**
 * A requester killed after it assigned a job (or an ensemble's part) to a provider and before the
 * provider's answer to the start came back leaves the job `pending` with the provider's node
 * stored, while the provider runs it. (Seen against three node processes: a 16-part ensemble
 * deployed and the requester killed with kill -9 0.3 s later.) Started again, the requester must
 * follow the run the provider began: placing the job anew was refused there for ever (`job …
 * already runs here`), so the ensemble waited for nodes for good, and a cancel then failed it on
 * the requester alone while its containers ran on at the providers, holding their shares.
 *
 * The crash is the stored state it leaves, written into the stopped requester's database: the
 * job pending on the provider's node, no run recorded.
 */
import { join } from 'node:path';
import sqlite3 from 'sqlite3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { listenAddr, stopCluster, waitFor } from '../helpers/network.js';
import { type LocalNode, restartLocalNode, startLocalNode } from '../helpers/local-node.js';
import { rest } from '../helpers/rest.js';
import { sharingCluster } from '../helpers/sharing-cluster.js';

type Job = { id: string; status: string; node: string | null; error: string | null };
type Ensemble = { id: string; status: string; reason: string | null; parts: { part: string; job_id: string; node: string | null; status: string }[] };

let a: LocalNode;
let b: LocalNode;

beforeAll(async () => void ([a, b] = await sharingCluster(2, { start: startLocalNode })), 120_000);
afterAll(() => stopCluster([a, b]));

/** What a requester killed while the start was unanswered has stored: the job pending on its node, not known to run. */
async function asIfKilledBeforeTheStartAnswered(home: string, jobId: string, ensemble?: string): Promise<void> {
  const db = new sqlite3.Database(join(home, 'dms.sqlite'));
  const run = (sql: string, params: unknown[]) => new Promise<void>((resolve, reject) => db.run(sql, params, (e) => (e ? reject(e) : resolve())));
  try {
    await run(`update job set status = 'pending', container_id = null, attempts = '[]' where id = ?`, [jobId]);
    await run(`delete from job_event where job_id = ? and to_status = 'running'`, [jobId]);
    if (ensemble) await run(`update ensemble set status = 'pending', reason = null where id = ?`, [ensemble]);
  } finally {
    await new Promise<void>((resolve) => db.close(() => resolve()));
  }
}

async function restartA(): Promise<void> {
  a = await restartLocalNode(a, { env: { DMS_NETWORK_BOOTSTRAP_PEERS: listenAddr(b) } });
}

const onB = async (id: string) => ((await rest(b, 'GET', '/api/v1/jobs')).json as Job[]).find((j) => j.id === id);

describe('a requester restarted before the answer to a start it asked', { timeout: 90_000 }, () => {
  it("follows the ensemble part's run on the provider, and its cancel stops it there", async () => {
    const made = await rest(a, 'POST', '/api/v1/ensembles', {
      name: 'unanswered',
      parts: { svc: { image: 'none', executor: 'null', kind: 'service', ports: [7000], resources: { cpu: 0.25, memory: '16MiB' }, environment: { DMS_NULL_DURATION_MS: '120000' }, placement: { node: b.peerId } } },
    });
    expect(made.status).toBe(201);
    const id = (made.json as Ensemble).id;
    const jobId = await waitFor('the part running on b', async () => {
      const e = (await rest(a, 'GET', `/api/v1/ensembles/${id}`)).json as Ensemble;
      return e.status === 'running' ? e.parts[0]!.job_id : undefined;
    }, { timeoutMs: 20_000 });
    await a.stop();
    await asIfKilledBeforeTheStartAnswered(a.home, jobId, id);
    await restartA();

    const again = await waitFor('the ensemble running again', async () => {
      const e = (await rest(a, 'GET', `/api/v1/ensembles/${id}`)).json as Ensemble;
      return e.status === 'running' ? e : undefined;
    }, { timeoutMs: 20_000 }).catch(async (e: unknown) => {
      throw new Error(`${(e as Error).message}; the ensemble: ${JSON.stringify((await rest(a, 'GET', `/api/v1/ensembles/${id}`)).json)}`);
    });
    expect(again.parts[0]).toMatchObject({ job_id: jobId, node: b.peerId, status: 'running' });
    expect((await onB(jobId))?.status).toBe('running');

    expect(((await rest(a, 'DELETE', `/api/v1/ensembles/${id}`)).json as Ensemble).status).toBe('failed');
    await waitFor("the part's run stopped on b", async () => (await onB(jobId))?.status === 'failed' || undefined, { timeoutMs: 20_000 });
  });

  it("follows a pinned job's run on the provider, and its cancel stops it there", async () => {
    const made = await rest(a, 'POST', '/api/v1/jobs', {
      name: 'unanswered',
      image: 'none',
      executor: 'null',
      resources: { cpu: 0.25, memory: '16MiB' },
      environment: { DMS_NULL_DURATION_MS: '120000' },
      placement: { node: b.peerId },
    });
    expect(made.status).toBe(201);
    const jobId = (made.json as Job).id;
    await waitFor('the job running on b', async () => ((await rest(a, 'GET', `/api/v1/jobs/${jobId}`)).json as Job).status === 'running' || undefined, { timeoutMs: 20_000 });
    await a.stop();
    await asIfKilledBeforeTheStartAnswered(a.home, jobId);
    await restartA();

    const job = await waitFor('the job running again', async () => {
      const j = (await rest(a, 'GET', `/api/v1/jobs/${jobId}`)).json as Job;
      return j.status === 'running' ? j : undefined;
    }, { timeoutMs: 20_000 }).catch(async (e: unknown) => {
      throw new Error(`${(e as Error).message}; the job: ${JSON.stringify((await rest(a, 'GET', `/api/v1/jobs/${jobId}/events`)).json)}`);
    });
    expect(job.node).toBe(b.peerId);
    expect((await onB(jobId))?.status).toBe('running');

    expect(((await rest(a, 'DELETE', `/api/v1/jobs/${jobId}`)).json as Job).status).toBe('failed');
    await waitFor("the job's run stopped on b", async () => (await onB(jobId))?.status === 'failed' || undefined, { timeoutMs: 20_000 });
  });
});
