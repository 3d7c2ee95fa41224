/**
 * A node whose operator changes what it offers tells its peers, and their next read of its
 * profile shows the change. Found by onboarding a node and listing the peers on another at once:
 * the list showed the new node offering nothing (`—`), from the copy kept for 5 s after the
 * last read, although the README said peers show the new figures the next time they read.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startCluster, stopCluster, waitFor } from '../helpers/network.js';
import { type LocalNode, startLocalNode } from '../helpers/local-node.js';

interface PeersReply {
  nodes: { id: string; profile: { onboarded: unknown; labels: Record<string, string> } | null; last_seen: string | null }[];
}

let a: LocalNode;
let b: LocalNode;
beforeAll(async () => {
  [a, b] = await startCluster(2, { start: startLocalNode });
}, 120_000);
afterAll(() => stopCluster([a, b]));

/** What node a's peer list says of node b now. */
const bOnA = async () => ((await (await fetch(`${a.url}/api/v1/peers`)).json()) as PeersReply).nodes.find((n) => n.id === b.peerId);
const configure = async (node: LocalNode, body: unknown) => {
  const r = await fetch(`${node.url}/api/v1/device/config`, { method: 'PUT', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
  expect(r.status, await r.text()).toBe(200);
};

describe("a peer's profile after its operator changes it", { timeout: 30_000 }, () => {
  it('is read anew by the next list, within the time a copy is otherwise kept', async () => {
    await waitFor("node b's profile on node a", async () => (await bOnA())?.profile ?? undefined, { timeoutMs: 15_000 });
    // Read just now: without word from b, a keeps this copy for 5 s.
    expect((await bOnA())?.profile?.onboarded).toBeNull();
    await configure(b, { onboarded: { cpu: 1, memory: '1GiB' }, labels: { zone: 'lab' } });
    const seen = await waitFor("node b's share on node a", async () => {
      const p = (await bOnA())?.profile;
      return p?.onboarded ? p : undefined;
    }, { timeoutMs: 3_000, intervalMs: 100 });
    expect(seen.labels).toEqual({ zone: 'lab' });

    // And back: offboarded, it offers nothing again at once.
    await configure(b, { onboarded: null });
    await waitFor("node b's share gone on node a", async () => ((await bOnA())?.profile?.onboarded === null ? true : undefined), { timeoutMs: 3_000, intervalMs: 100 });
  });
});
