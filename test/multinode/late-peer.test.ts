/**
 * A job that cannot run here now, submitted before the node had any peer, is offered to the
 * network as soon as a peer connects (the job machine's `peer_joined`), rather than waiting for
 * this node's resources to be freed or for its next back-off.
 */
import { afterAll, beforeAll, describe, expect, it, onTestFinished } from 'vitest';
import { setTimeout as sleep } from 'node:timers/promises';
import { listenAddr, waitFor } from '../helpers/network.js';
import { type LocalNode, startLocalNode } from '../helpers/local-node.js';
import { ForeignPeer } from '../helpers/peer.js';
import { rest } from '../helpers/rest.js';

let a: LocalNode;
let b: LocalNode | undefined;

beforeAll(async () => {
  a = await startLocalNode();
}, 60_000);
afterAll(async () => {
  await b?.stop();
  await a?.stop();
});

type Job = { id: string; status: string; node: string | null; pending_reason: string | null };

/** Fills `node` with a long local job, then submits one that must wait there; resolves with the waiting job's id. */
async function waitingJobOn(node: LocalNode): Promise<string> {
  const job = async (id: string) => (await rest(node, 'GET', `/api/v1/jobs/${id}`)).json as Job;
  const usage = (await rest(node, 'GET', '/api/v1/resources/usage')).json as { free: { cpu: { cores: number } } };
  const filler = (await rest(node, 'POST', '/api/v1/jobs', {
    name: 'filler', image: 'none', executor: 'null', resources: { cpu: usage.free.cpu.cores, memory: '16MiB' },
    environment: { DMS_NULL_DURATION_MS: '120000' }, placement: { local: true },
  })).json as Job;
  await waitFor('the filler running', async () => (await job(filler.id)).status === 'running', { timeoutMs: 10_000 });
  const waiting = (await rest(node, 'POST', '/api/v1/jobs', { name: 'waiting', image: 'none', executor: 'null', resources: { cpu: 0.5, memory: '16MiB' } })).json as Job;
  await waitFor('the second job waiting for resources', async () => (await job(waiting.id)).pending_reason?.startsWith('waiting for resources') || undefined, { timeoutMs: 10_000 });
  return waiting.id;
}

describe('a peer joining', { timeout: 60_000 }, () => {
  it('takes a job that waits on a node with no peer, at once', async () => {
    const job = async (id: string) => (await rest(a, 'GET', `/api/v1/jobs/${id}`)).json as Job;
    const waiting = { id: await waitingJobOn(a) };

    // A node with a share joins the network: the waiting job goes there without anything freed here.
    b = await startLocalNode({ env: { DMS_NETWORK_BOOTSTRAP_PEERS: listenAddr(a) } });
    expect((await rest(b, 'PUT', '/api/v1/device/config', { onboarded: { cpu: 1, memory: '1GiB' } })).status).toBe(200);
    const done = await waitFor('the waiting job completed on the new peer', async () => {
      const j = await job(waiting.id);
      return j.status === 'completed' ? j : undefined;
    }, { timeoutMs: 20_000 });
    expect(done.node).toBe(b.peerId);
  });

  it('wakes waiting jobs at most once per longest back-off, however often peers connect', async () => {
    const c = await startLocalNode({ config: { deployment: { offer_retry_ms: 20_000, max_offer_backoff_ms: 20_000 } } });
    onTestFinished(async () => void (await c.stop()));
    const waiting = await waitingJobOn(c);
    const job = async () => (await rest(c, 'GET', `/api/v1/jobs/${waiting}`)).json as Job;
    // Each offer nobody took is one `waiting` placement decision on the node's metrics.
    const fruitless = async () => Number(/^dms_placements_total\{outcome="waiting"\} (\d+)$/m.exec(await (await fetch(`${c.url}/metrics`)).text())?.[1] ?? 0);
    const first = await ForeignPeer.connectedTo(c);
    onTestFinished(async () => void (await first.stop()));
    await waitFor('the job offered once the first peer connected', async () => (await job()).pending_reason?.startsWith('waiting for a node') || undefined, { timeoutMs: 10_000 });
    const before = await fruitless();
    // Four more identities connect and go, past libp2p's 5-a-second guard: no more offers.
    for (let i = 0; i < 4; i++) {
      await sleep(300);
      const churn = await ForeignPeer.connectedTo(c);
      await churn.stop();
    }
    await sleep(1_000);
    expect(await fruitless()).toBe(before);
    expect((await job()).status).toBe('pending');
  });
});
