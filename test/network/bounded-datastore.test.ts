/** The libp2p host's datastore within its bound (runtime/network/bounded-datastore.ts), in process. */
import { describe, expect, it } from 'vitest';
import { Key } from 'interface-datastore';
import { BoundedDatastore, ownerOf } from '../../runtime/network/bounded-datastore.js';

const provider = (cid: string, peer: string) => new Key(`/dht/provider/${cid}/${peer}`);
const value = new Uint8Array([1]);

describe('ownerOf', () => {
  it('is the peer a provider record names, else the first two parts of the key', () => {
    expect(ownerOf('/dht/provider/ciqabc/12D3KooWPeer')).toBe('provider:12D3KooWPeer');
    expect(ownerOf('/peers/bafzpeer')).toBe('/peers/bafzpeer');
    expect(ownerOf('/dht/record/xyz/more')).toBe('/dht/record');
  });
});

describe('BoundedDatastore', () => {
  it("keeps an owner to its share, its oldest going for its new ones; another owner's entries stay", async () => {
    const store = new BoundedDatastore(100, 3);
    await store.put(provider('honest', 'H'), value);
    for (let i = 0; i < 10; i++) await store.put(provider(`made-up-${i}`, 'A'), value);
    expect(store.size).toBe(4);
    expect(await store.has(provider('honest', 'H'))).toBe(true);
    expect(await store.has(provider('made-up-6', 'A'))).toBe(false);
    for (const i of [7, 8, 9]) expect(await store.has(provider(`made-up-${i}`, 'A'))).toBe(true);
  });

  it('past the bound in all, takes the oldest entry of the owner holding most', async () => {
    const store = new BoundedDatastore(6, 100);
    await store.put(provider('h1', 'H'), value);
    for (let i = 0; i < 4; i++) await store.put(provider(`a${i}`, 'A'), value);
    await store.put(new Key('/peers/P'), value);
    await store.put(new Key('/peers/Q'), value);
    expect(store.size).toBe(6);
    expect(await store.has(provider('a0', 'A'))).toBe(false);
    expect(await store.has(provider('h1', 'H'))).toBe(true);
    // A crowd of owners of one entry each: the owner holding most still pays first.
    for (let i = 0; i < 2; i++) await store.put(new Key(`/peers/crowd${i}`), value);
    expect(store.size).toBe(6);
    expect(await store.has(provider('h1', 'H'))).toBe(true);
    expect(await store.has(provider('a1', 'A'))).toBe(false);
    expect(await store.has(provider('a2', 'A'))).toBe(false);
    expect(await store.has(provider('a3', 'A'))).toBe(true);
  });

  it('counts an entry written again once, as its newest, and one deleted no more', async () => {
    const store = new BoundedDatastore(100, 2);
    await store.put(provider('x', 'A'), value);
    await store.put(provider('y', 'A'), value);
    await store.put(provider('x', 'A'), value);
    await store.put(provider('z', 'A'), value);
    // y was the oldest once x was written again.
    expect(await store.has(provider('y', 'A'))).toBe(false);
    expect(await store.has(provider('x', 'A'))).toBe(true);
    await store.delete(provider('x', 'A'));
    await store.delete(provider('x', 'A'));
    expect(store.size).toBe(1);
  });

  it("gives the node's own provider records no share but the whole bound", async () => {
    const store = new BoundedDatastore(10, 2, 'SELF');
    for (let i = 0; i < 5; i++) await store.put(provider(`own${i}`, 'SELF'), value);
    expect(store.size).toBe(5);
    for (let i = 0; i < 5; i++) expect(await store.has(provider(`own${i}`, 'SELF'))).toBe(true);
  });

  it("answers a query for one CID's provider records from its index, exactly those, as they come and go", async () => {
    const store = new BoundedDatastore(100, 2);
    await store.put(provider('cid1', 'A'), value);
    await store.put(provider('cid1', 'B'), value);
    // A CID whose text begins with the other's is another CID, not more of its records.
    await store.put(provider('cid10', 'C'), value);
    await store.put(new Key('/peers/cid1'), value);
    const keysOf = async (prefix: string) => {
      const keys: string[] = [];
      for await (const { key } of store.query({ prefix })) keys.push(key.toString());
      return keys.sort();
    };
    expect(await keysOf('/dht/provider/cid1')).toEqual(['/dht/provider/cid1/A', '/dht/provider/cid1/B']);
    expect(await keysOf('/dht/provider/cid1/')).toEqual(['/dht/provider/cid1/A', '/dht/provider/cid1/B']);
    await store.delete(provider('cid1', 'A'));
    // B's share is 2: a third record of B's takes its oldest, cid1's.
    await store.put(provider('cid2', 'B'), value);
    await store.put(provider('cid3', 'B'), value);
    expect(await keysOf('/dht/provider/cid1')).toEqual([]);
    expect(await keysOf('/dht/provider/nothing')).toEqual([]);
    // Any other query walks the store as before.
    expect(await keysOf('/dht/provider/')).toEqual(['/dht/provider/cid10/C', '/dht/provider/cid2/B', '/dht/provider/cid3/B']);
  });
});
