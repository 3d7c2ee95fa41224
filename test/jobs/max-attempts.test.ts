import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { decodePayload, type Envelope } from '../../runtime/wire/envelope.js';
import { waitFor } from '../helpers/network.js';
import { type NodeProcess, removeHome, startNode } from '../helpers/node.js';
import { ForeignPeer } from '../helpers/peer.js';

/**
 * README "Placement on the network": a job whose provider refuses to start it is placed again
 * while its `placement.max_attempts` last, then fails. The provider is a foreign peer that bids,
 * leases, and refuses every start; the job is pinned to it, so it is asked again each time.
 */

let node: NodeProcess;
let provider: ForeignPeer;
let responder: NodeJS.Timeout;

/** Answers `request` from the provider with `payload`. */
function answer(request: Envelope, payload: unknown): Promise<void> {
  return provider.send(provider.replyTo(request, payload, 'deployment'));
}

beforeAll(async () => {
  node = await startNode({});
  provider = await ForeignPeer.connectedTo(node);
  let seen = 0;
  // A provider that takes every lease and refuses every start.
  responder = setInterval(() => {
    for (; seen < provider.arrived.length; seen++) {
      const env = provider.arrived[seen];
      if (!env.opt.cont) continue;
      const p = decodePayload(env.msg) as any;
      if (env.be === '/dms/deployment/bid') {
        void answer(env, { node: provider.host, answers: p.jobs.map((j: any) => ({ job_id: j.job_id, free: j.resources, load: 0, executors: ['null'] })) });
      } else if (env.be === '/dms/deployment/reserve') {
        void answer(env, { until: new Date(Date.now() + 10_000).toISOString() });
      } else if (env.be === '/dms/deployment/start') {
        void answer(env, { error: `no start for job ${p.job.id} here`, kind: 'unavailable' });
      }
    }
  }, 20);
}, 60_000);
afterAll(async () => {
  clearInterval(responder);
  await provider?.stop();
  await node?.stop();
  if (node) removeHome(node.home);
});

const starts = (id: string) => provider.arrived.filter((e) => e.be === '/dms/deployment/start' && (decodePayload(e.msg) as any).job?.id === id);

async function submit(maxAttempts: number): Promise<string> {
  const res = await fetch(`${node.url}/api/v1/jobs`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ name: 'refused', image: 'none', executor: 'null', placement: { node: provider.host, max_attempts: maxAttempts } }),
  });
  expect(res.status).toBe(201);
  return ((await res.json()) as { id: string }).id;
}

const job = async (id: string) => (await (await fetch(`${node.url}/api/v1/jobs/${id}`)).json()) as any;

describe('placement.max_attempts', () => {
  it('a job refused at every start is started max_attempts (2) times, then fails with the refusal; the attempts name the node', { timeout: 30_000 }, async () => {
    const id = await submit(2);
    const failed = await waitFor(`job ${id} to fail`, async () => {
      const j = await job(id);
      return j.status === 'failed' && j;
    }, { timeoutMs: 20_000, intervalMs: 100 });
    expect(starts(id)).toHaveLength(2);
    // The job fails naming the node, and every placement is on the record, the last included.
    expect(failed.error).toBe(`node ${provider.host} could not start it: no start for job ${id} here`);
    expect(failed.attempts).toHaveLength(2);
    for (const a of failed.attempts) expect(a).toMatchObject({ node: provider.host, outcome: 'refused', reason: `node ${provider.host} could not start it: no start for job ${id} here` });
    // Failed for good: not offered again.
    await new Promise((r) => setTimeout(r, 1_500));
    expect(starts(id)).toHaveLength(2);
  });

  it('with max_attempts 3 the same job is started three times before it fails', { timeout: 30_000 }, async () => {
    const id = await submit(3);
    await waitFor(`job ${id} to fail`, async () => (await job(id)).status === 'failed', { timeoutMs: 20_000, intervalMs: 100 });
    expect(starts(id)).toHaveLength(3);
  });
});
