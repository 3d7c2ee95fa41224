/** The bound on one peer's addresses in libp2p's peer store (runtime/network/peer-addresses.ts), on a stand-in store. */
import { describe, expect, it } from 'vitest';
import type { PeerData, PeerId, PeerStore } from '@libp2p/interface';
import { multiaddr } from '@multiformats/multiaddr';
import { boundPeerAddresses } from '../../runtime/network/peer-addresses.js';

const addrs = (n: number, from = 0) => Array.from({ length: n }, (_, i) => multiaddr(`/ip4/10.0.0.1/tcp/${1000 + from + i}`));

/** Holds addresses as libp2p's store does: save and patch replace them, merge adds. */
function standIn() {
  const held: PeerData['multiaddrs'][] = [];
  let current: NonNullable<PeerData['multiaddrs']> = [];
  const store = {
    save: async (_id: PeerId, d: PeerData) => void (current = [...(d.multiaddrs ?? [])], held.push(current)),
    patch: async (_id: PeerId, d: PeerData) => void (current = [...(d.multiaddrs ?? [])], held.push(current)),
    merge: async (_id: PeerId, d: PeerData) => void (current = [...current, ...(d.multiaddrs ?? [])], held.push(current)),
    get: async () => ({ addresses: current.map((m) => ({ multiaddr: m, isCertified: false })) }),
  };
  return { store: store as unknown as PeerStore, held: () => current };
}

const id = {} as PeerId;

describe('boundPeerAddresses', () => {
  it('merges only as many addresses as there is room for', async () => {
    const { store, held } = standIn();
    boundPeerAddresses(store, 4);
    await store.merge(id, { multiaddrs: addrs(3) });
    await store.merge(id, { multiaddrs: addrs(3, 10) });
    expect(held()).toHaveLength(4);
    await store.merge(id, { multiaddrs: addrs(100, 20), tags: { t: { value: 1 } } });
    expect(held()).toHaveLength(4);
  });

  it('saves and patches at most the bound', async () => {
    const { store, held } = standIn();
    boundPeerAddresses(store, 4);
    await store.save(id, { multiaddrs: addrs(50) });
    expect(held()).toHaveLength(4);
    await store.patch(id, { multiaddrs: addrs(2) });
    expect(held()).toHaveLength(2);
  });
});
