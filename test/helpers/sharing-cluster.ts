import { expect } from 'vitest';
import { DmsClient } from '../../client/client.js';
import { type ClusterOptions, startCluster, stopCluster, waitFor } from './network.js';
import type { NodeProcess, TestNode } from './node.js';

/**
 * `n` nodes for a test across nodes (startCluster: processes, or in this process with
 * `start: startLocalNode`) where node 1 places jobs on the others: nodes 2..n onboard a share
 * (1 core, 1 GiB), and node 1 is connected to every other before it returns.
 */
export async function sharingCluster<N extends TestNode = NodeProcess>(n: number, opts: ClusterOptions<N> = {}): Promise<N[]> {
  const nodes = await startCluster(n, opts);
  try {
    for (const node of nodes.slice(1)) {
      const put = await fetch(`${node.url}/api/v1/device/config`, { method: 'PUT', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ onboarded: { cpu: 1, memory: '1GiB' } }) });
      expect(put.status).toBe(200);
    }
    const [first, ...others] = nodes;
    await waitFor(`node 1 connected to the other ${others.length}`, async () => {
      const peers = await new DmsClient({ url: first!.url, timeoutMs: 5_000 }).peers();
      return others.every((o) => peers.includes(o.peerId));
    }, { timeoutMs: 60_000 });
    return nodes;
  } catch (e) {
    // The caller never gets the nodes to stop: a node left running in the test's own process keeps it from exiting.
    await stopCluster(nodes);
    throw e;
  }
}
