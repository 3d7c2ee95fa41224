/**
 * A job pinned to another node runs there or nowhere. Found by the hostile placement soak: a
 * pinned job waiting for its node was handed to this node's own scheduler whenever resources
 * were freed here, and ran on the requester, its placement ignored.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { setTimeout as sleep } from 'node:timers/promises';
import { startCluster, stopCluster, waitFor } from '../helpers/network.js';
import { type LocalNode, startLocalNode } from '../helpers/local-node.js';

let a: LocalNode;
let b: LocalNode;

const post = async (node: LocalNode, body: unknown) => {
  const r = await fetch(`${node.url}/api/v1/jobs`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
  expect(r.status).toBe(201);
  return (await r.json()) as { id: string };
};
const job = async (node: LocalNode, id: string) => (await (await fetch(`${node.url}/api/v1/jobs/${id}`)).json()) as { status: string; node: string | null; pending_reason: string | null };

beforeAll(async () => {
  [a, b] = await startCluster(2, { start: startLocalNode });
}, 120_000);
afterAll(() => stopCluster([a, b]));

describe('a job pinned to another node', { timeout: 40_000 }, () => {
  it('keeps waiting for that node when resources are freed on the requester, and runs there once it offers a share', async () => {
    // Node a offers too small a share (one offering nothing is refused at submission): the pinned job waits, saying why.
    const small = await fetch(`${a.url}/api/v1/device/config`, { method: 'PUT', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ onboarded: { cpu: 0.05, memory: '1GiB' } }) });
    expect(small.status).toBe(200);
    const pinned = await post(b, { name: 'pinned', image: 'none', executor: 'null', resources: { cpu: 0.1, memory: '16MiB' }, placement: { node: a.peerId } });
    await waitFor('the pinned job waiting for node a', async () => (await job(b, pinned.id)).pending_reason?.includes(`node ${a.peerId} cannot hold it`) || undefined, { timeoutMs: 10_000 });
    // Jobs that end on node b free resources there, more than once.
    for (let i = 0; i < 3; i++) {
      const local = await post(b, { name: 'local', image: 'none', executor: 'null', resources: { cpu: 0.1, memory: '16MiB' }, placement: { local: true } });
      await waitFor('the local job completed', async () => (await job(b, local.id)).status === 'completed', { timeoutMs: 10_000 });
      await sleep(300);
      expect(await job(b, pinned.id)).toMatchObject({ status: 'pending', node: null });
    }
    const put = await fetch(`${a.url}/api/v1/device/config`, { method: 'PUT', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ onboarded: { cpu: 1, memory: '1GiB' } }) });
    expect(put.status).toBe(200);
    const done = await waitFor('the pinned job completed', async () => {
      const j = await job(b, pinned.id);
      return j.status === 'completed' ? j : undefined;
    }, { timeoutMs: 20_000 });
    expect(done.node).toBe(a.peerId);
  });
});
