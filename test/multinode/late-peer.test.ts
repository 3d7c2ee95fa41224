/**
 * A job that cannot run here now, submitted before the node had any peer, is offered to the
 * network as soon as a peer connects (the job machine's `peer_joined`), rather than waiting for
 * this node's resources to be freed or for its next back-off.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { listenAddr, waitFor } from '../helpers/network.js';
import { type LocalNode, startLocalNode } from '../helpers/local-node.js';
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

describe('a peer joining', { timeout: 60_000 }, () => {
  it('takes a job that waits on a node with no peer, at once', async () => {
    const job = async (id: string) => (await rest(a, 'GET', `/api/v1/jobs/${id}`)).json as Job;
    const usage = (await rest(a, 'GET', '/api/v1/resources/usage')).json as { free: { cpu: { cores: number } } };
    // Node a is full with a long local job; a second one waits here, with nobody to offer it to.
    const filler = (await rest(a, 'POST', '/api/v1/jobs', {
      name: 'filler', image: 'none', executor: 'null', resources: { cpu: usage.free.cpu.cores, memory: '16MiB' },
      environment: { DMS_NULL_DURATION_MS: '120000' }, placement: { local: true },
    })).json as Job;
    await waitFor('the filler running', async () => (await job(filler.id)).status === 'running', { timeoutMs: 10_000 });
    const waiting = (await rest(a, 'POST', '/api/v1/jobs', { name: 'waiting', image: 'none', executor: 'null', resources: { cpu: 0.5, memory: '16MiB' } })).json as Job;
    await waitFor('the second job waiting for resources', async () => (await job(waiting.id)).pending_reason?.startsWith('waiting for resources') || undefined, { timeoutMs: 10_000 });

    // A node with a share joins the network: the waiting job goes there without anything freed here.
    b = await startLocalNode({ env: { DMS_NETWORK_BOOTSTRAP_PEERS: listenAddr(a) } });
    expect((await rest(b, 'PUT', '/api/v1/device/config', { onboarded: { cpu: 1, memory: '1GiB' } })).status).toBe(200);
    const done = await waitFor('the waiting job completed on the new peer', async () => {
      const j = await job(waiting.id);
      return j.status === 'completed' ? j : undefined;
    }, { timeoutMs: 20_000 });
    expect(done.node).toBe(b.peerId);
    expect((await job(filler.id)).status).toBe('running');
  });
});
