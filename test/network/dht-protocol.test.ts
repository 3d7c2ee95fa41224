/**
 * `network.ProtocolID` (the kad-dht protocol id) keeps DHTs apart: hosts built as the node
 * builds them (createHost) fill each other's routing tables when their ids match and never when
 * they differ, though they are connected either way (README: it does not separate nodes that
 * dial each other; capabilities do that).
 */
import type { SingleKadDHT } from '@libp2p/kad-dht';
import { afterAll, expect, it } from 'vitest';
import { KeyPair } from '../../runtime/crypto/keys.js';
import { createHost, type DmsLibp2p } from '../../runtime/network/host.js';
import { waitFor } from '../helpers/network.js';

const hosts: DmsLibp2p[] = [];
afterAll(() => Promise.all(hosts.map((h) => h.stop())));

async function host(protocolId: string): Promise<DmsLibp2p> {
  const h = await createHost({ keyPair: KeyPair.generate(), listen: ['/ip4/127.0.0.1/tcp/0'], protocolId, inboundConnectionThreshold: 100 });
  hosts.push(h);
  await h.start();
  return h;
}
const table = (h: DmsLibp2p) => (h.services.dht as SingleKadDHT).routingTable;

it('fills the routing table with peers of the same ProtocolID only', { timeout: 30_000 }, async () => {
  const [a, same, other] = [await host('/net-one/kad/1.0.0'), await host('/net-one/kad/1.0.0'), await host('/net-two/kad/1.0.0')];
  await a.dial(same.getMultiaddrs()[0]);
  await a.dial(other.getMultiaddrs()[0]);
  // Identify done both ways: each side knows what the other speaks, the other id included.
  await waitFor('a to learn both peers’ protocols', async () => {
    const protocols = async (peer: DmsLibp2p) => (await a.peerStore.get(peer.peerId)).protocols;
    return (await protocols(same)).includes('/net-one/kad/1.0.0') && (await protocols(other)).includes('/net-two/kad/1.0.0');
  }, { timeoutMs: 15_000, intervalMs: 50 });
  await waitFor('a and its same-id peer in each other’s routing tables', () => table(a).size === 1 && table(same).size === 1, { timeoutMs: 15_000, intervalMs: 50 });
  expect(a.getConnections(other.peerId).length).toBeGreaterThan(0);
  expect(table(other).size).toBe(0);
  expect(table(a).size).toBe(1);
});
