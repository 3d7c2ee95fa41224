/**
 * A holder that answers each exchange just within the exchange's timeout (README "Job outputs",
 * Moving blocks): a fetch that names it beside an honest holder gives up an exchange that brings
 * no block for the stall time, asks the honest one, and asks the slow one last from then on. A
 * holder that is slow but keeps sending blocks is not dropped.
 */
import { Readable } from 'node:stream';
import { randomBytes } from 'node:crypto';
import { afterAll, describe, expect, it } from 'vitest';
import type { Stream } from '@libp2p/interface';
import type { CID } from 'multiformats/cid';
import { encodeBytesFrame as frame } from '../../runtime/network/frames.js';
import type { BlockStore } from '../../runtime/blocks/store.js';
import { fileContent, importFile, rootEntry } from '../../runtime/blocks/unixfs.js';
import { BlockHosts } from '../helpers/block-hosts.js';
import { within } from '../helpers/network.js';

const hosts = new BlockHosts();
afterAll(() => hosts.stop());

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Answers each CID asked with its block from `store`, waiting `first` ms before the first answer and `gap` ms before each next one. */
function answering(store: BlockStore, first: number, gap: number, asked: { exchanges: number }) {
  return async (want: CID[], stream: Stream) => {
    asked.exchanges++;
    try {
      await sleep(first);
      for (const [i, cid] of want.entries()) {
        if (i > 0) await sleep(gap);
        if (!stream.send(frame(Uint8Array.of(1), cid.bytes, await store.get(cid)))) await stream.onDrain();
      }
    } catch {
      // The asker gave the exchange up.
    }
  };
}

async function readBack(store: BlockStore, cid: CID): Promise<Buffer> {
  const parts: Buffer[] = [];
  for await (const c of fileContent(await rootEntry(cid, store.fs))) parts.push(Buffer.from(c));
  return Buffer.concat(parts);
}

describe('a slow block holder', () => {
  // The exchange timeout and the stall time scaled down from 60 s and 10 s.
  const TIMEOUT_MS = 6_000;
  const STALL_MS = 1_000;

  it('is given up after the stall time for a holder that answers, and asked last from then on', { timeout: 30_000 }, async () => {
    const honest = await hosts.side();
    const slowStore = await hosts.store();
    const slowAsked = { exchanges: 0 };
    // Every answer just within the asker's exchange timeout.
    const slow = await hosts.hostile(answering(slowStore, TIMEOUT_MS - 1_000, 0, slowAsked));
    const fetcher = await hosts.side({ inFlight: 16, timeoutMs: TIMEOUT_MS, stallMs: STALL_MS });
    await fetcher.t.node.dial(honest.t.node.getMultiaddrs());
    await fetcher.t.node.dial(slow.node.getMultiaddrs());
    const file = async () => {
      const data = randomBytes(4 * 1024 * 1024 + 5);
      const { cid } = await importFile(Readable.from([data]), honest.store.fs, { maxBytes: data.length });
      await importFile(Readable.from([data]), slowStore.fs, { maxBytes: data.length });
      return { cid, data };
    };

    const first = await file();
    // Two levels (a root, then 17 leaves in two rounds of exchanges): three answers of the slow
    // holder's in a row, 15 s, where one stall and the honest holder's answers take about 1.5 s.
    await within(8_000, 'a fetch naming the slow holder first, then the honest one', fetcher.ex.fetchDag(first.cid, [slow.host, honest.t.host]));
    expect((await readBack(fetcher.store, first.cid)).equals(first.data)).toBe(true);
    expect(fetcher.ex.isSlow(slow.host)).toBe(true);
    expect(fetcher.ex.isSlow(honest.t.host)).toBe(false);

    // Named first again, it is asked after the honest holder, which has everything.
    const second = await file();
    const before = slowAsked.exchanges;
    await within(8_000, 'a second fetch naming the slow holder first', fetcher.ex.fetchDag(second.cid, [slow.host, honest.t.host]));
    expect((await readBack(fetcher.store, second.cid)).equals(second.data)).toBe(true);
    expect(slowAsked.exchanges - before).toBe(0);
  });

  it('that keeps sending blocks, each within the stall time, is not dropped however long the exchange takes', { timeout: 30_000 }, async () => {
    const loadedStore = await hosts.store();
    const asked = { exchanges: 0 };
    // 600 ms before each block: an exchange of 4 blocks takes 2.4 s, over twice the stall time.
    const loaded = await hosts.hostile(answering(loadedStore, 600, 600, asked));
    const fetcher = await hosts.side({ inFlight: 16, timeoutMs: TIMEOUT_MS, stallMs: STALL_MS });
    await fetcher.t.node.dial(loaded.node.getMultiaddrs());
    const data = randomBytes(2 * 1024 * 1024);
    const { cid } = await importFile(Readable.from([data]), loadedStore.fs, { maxBytes: data.length });
    await within(15_000, 'a fetch from the loaded holder alone', fetcher.ex.fetchDag(cid, [loaded.host]));
    expect((await readBack(fetcher.store, cid)).equals(data)).toBe(true);
    expect(fetcher.ex.isSlow(loaded.host)).toBe(false);
  });

  it("that trickles blocks, each within the stall time, until the exchange's timeout is asked last from then on", { timeout: 30_000 }, async () => {
    const honest = await hosts.side();
    const trickleStore = await hosts.store();
    const asked = { exchanges: 0 };
    // A block every second: never a stall of 1.5 s, but the 4 blocks of an exchange (16 in
    // flight, in 4 exchanges) take 3 s, past the exchange's 2.5 s.
    const trickler = await hosts.hostile(answering(trickleStore, 0, 1_000, asked));
    const fetcher = await hosts.side({ inFlight: 16, timeoutMs: 2_500, stallMs: 1_500 });
    await fetcher.t.node.dial(honest.t.node.getMultiaddrs());
    await fetcher.t.node.dial(trickler.node.getMultiaddrs());
    const data = randomBytes(4 * 1024 * 1024 + 5);
    const { cid } = await importFile(Readable.from([data]), honest.store.fs, { maxBytes: data.length });
    await importFile(Readable.from([data]), trickleStore.fs, { maxBytes: data.length });
    await within(15_000, 'a fetch naming the trickling holder first, then the honest one', fetcher.ex.fetchDag(cid, [trickler.host, honest.t.host]));
    expect((await readBack(fetcher.store, cid)).equals(data)).toBe(true);
    // Else every fetch naming it first pays the exchange's whole timeout.
    expect(fetcher.ex.isSlow(trickler.host)).toBe(true);
  });
});
