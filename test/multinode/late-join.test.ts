/**
 * Nodes that reach the network only after their first second still meet its other nodes. The
 * DHT looks itself up one second after a node starts, and then every five minutes; since its
 * lookups run with no peer known (so a dial of an unknown peer fails at once), a node whose
 * first peer came after that second met nobody else for five minutes. A loaded CI machine
 * started three nodes that way, and two of them never saw each other in 20 s.
 */
import { afterAll, beforeAll, describe, it } from 'vitest';
import { DiscoveryBehaviors } from '../../behaviors/discovery.js';
import { DmsClient } from '../../client/client.js';
import { listenAddr, stopCluster, waitFor } from '../helpers/network.js';
import { type LocalNode, startLocalNode } from '../helpers/local-node.js';

let nodes: LocalNode[] = [];

beforeAll(async () => {
  // No bootstrap peers: each starts alone, and its DHT's first lookup finds nobody.
  nodes = await Promise.all([0, 1, 2].map(() => startLocalNode()));
}, 60_000);
afterAll(() => stopCluster(nodes));

const peersOf = async (node: LocalNode) => new DmsClient({ url: node.url }).peers();

describe('a node that joins after its first second', { timeout: 30_000 }, () => {
  it('meets the nodes its first peer knows, not only that peer', async () => {
    const [hub, b, c] = nodes;
    // Past the DHT's first lookup (1 s after start) on both.
    await new Promise((r) => setTimeout(r, 1_500));
    // As `dms peers connect` does (unsigned: loopback is trusted).
    for (const node of [b, c]) await new DmsClient({ url: node.url }).invoke('root', DiscoveryBehaviors.peersConnect, { address: listenAddr(hub) }, { raw: true });
    await waitFor('the two nodes that joined through the hub to see each other', async () => (await peersOf(b)).includes(c.peerId) && (await peersOf(c)).includes(b.peerId), { timeoutMs: 15_000 });
  });
});
