/**
 * Blocks two imports share (README "Job outputs", Retention): the same bytes make the same CID,
 * so two uploads of one file, or an output and an upload with content in common, write the same
 * block files. A failed import deletes what it wrote, and retention deletes what no root keeps:
 * neither may take a block another import, under way or completed, still needs.
 */
import { existsSync, readdirSync, utimesSync } from 'node:fs';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import type { CID } from 'multiformats/cid';
import * as raw from 'multiformats/codecs/raw';
import type { BlockStore } from '../../runtime/blocks/store.js';
import { fileContent, importFile, rootEntry } from '../../runtime/blocks/unixfs.js';
import { collectGarbage } from '../../runtime/blocks/retention.js';
import { block } from '../helpers/dag.js';
import { tempStores } from '../helpers/temp-stores.js';

const freshStore = tempStores('dms-shared-').store;

const MiB = 1024 * 1024;

const blockFiles = (store: BlockStore) => readdirSync(store.dir, { recursive: true }).filter((f) => String(f).endsWith('.data')).length;

/** The file under `cid` read back whole, or what is wrong with it. */
async function readBack(store: BlockStore, cid: CID, expected: Buffer): Promise<string> {
  try {
    const parts: Buffer[] = [];
    for await (const c of fileContent(await rootEntry(cid, store.fs))) parts.push(Buffer.from(c));
    return Buffer.concat(parts).equals(expected) ? 'whole' : 'different bytes';
  } catch (e) {
    return `unreadable: ${(e as Error).message}`;
  }
}

const settled = async (p: Promise<unknown>): Promise<PromiseSettledResult<unknown>> => (await Promise.allSettled([p]))[0];

/** A source that yields `data` in 256 KiB pieces, each after `gate` lets it through: two imports interleave piece by piece. */
async function* piecewise(data: Buffer, gate: () => Promise<void>): AsyncGenerator<Uint8Array> {
  for (let i = 0; i < data.length; i += 256 * 1024) {
    await gate();
    yield data.subarray(i, i + 256 * 1024);
  }
}

describe('blocks two imports share', () => {
  for (const order of ['the failing one first', 'the completing one first', 'piece by piece'] as const) {
    it(`one import fails, the other of the same file completes (${order}): the completed one's DAG is whole`, async () => {
      const store = await freshStore();
      const data = randomBytes(2 * MiB + 17);
      let turn = Promise.resolve();
      const gate = order === 'piece by piece' ? () => (turn = turn.then(() => new Promise((r) => setImmediate(r)))) : async () => undefined;
      const failing = () =>
        store.importAll(async (s) => {
          await importFile(piecewise(data, gate), s, { maxBytes: data.length });
          throw new Error('cut');
        });
      const completing = () => store.importAll((s) => importFile(piecewise(data, gate), s, { maxBytes: data.length }));
      let done: PromiseSettledResult<unknown>[];
      if (order === 'the failing one first') done = [await settled(failing()), await settled(completing())];
      else if (order === 'the completing one first') done = [await settled(completing()), await settled(failing())].reverse();
      else done = await Promise.allSettled([failing(), completing()]);
      expect(done[0].status).toBe('rejected');
      expect(done[1].status).toBe('fulfilled');
      const { cid } = (done[1] as PromiseFulfilledResult<{ cid: CID }>).value;
      expect(await readBack(store, cid, data)).toBe('whole');
    });
  }

  it('deletes a block both imports wrote once both failed: nothing is left behind', async () => {
    const store = await freshStore();
    const [cid, bytes] = block(raw.code, randomBytes(1000));
    const a = store.importing();
    const b = store.importing();
    await a.store.put(cid, bytes);
    await b.store.put(cid, bytes);
    await a.discard();
    // Looked at on disk: a look-up through the store is a need of its own, which keeps the block.
    expect(existsSync(store.fileOf(cid))).toBe(true);
    await b.discard();
    expect(blockFiles(store)).toBe(0);
    expect(store.bytes).toBe(0);
  });

  it('retention leaves a block held before that an import under way writes again, and one two imports under way share', async () => {
    const store = await freshStore();
    const data = randomBytes(MiB);
    // Held from an earlier upload long ago, which nothing keeps: what retention deletes first.
    const earlier = await store.importAll((s) => importFile(piecewise(data, async () => undefined), s, { maxBytes: data.length }));
    const past = new Date(Date.now() - 3600_000);
    for (const f of readdirSync(store.dir, { recursive: true })) if (String(f).endsWith('.data')) utimesSync(join(store.dir, String(f)), past, past);
    // The same file uploaded again, collected once its leaves are written (all held already) and before its root is.
    let release!: () => void;
    const halfway = new Promise<void>((r) => (release = r));
    let reached!: () => void;
    const leavesWritten = new Promise<void>((r) => (reached = r));
    const again = store.importAll((s) =>
      importFile(piecewise(data, async () => undefined), {
        put: async (key, value) => {
          if (key.code !== raw.code) {
            reached();
            await halfway;
          }
          return s.put(key, value);
        },
      }, { maxBytes: data.length }),
    );
    // And two imports under way sharing a block neither has finished with.
    const [shared, sharedBytes] = block(raw.code, randomBytes(1000));
    const one = store.importing();
    const two = store.importing();
    await one.store.put(shared, sharedBytes);
    await two.store.put(shared, sharedBytes);
    await leavesWritten;
    await collectGarbage(store, 0, []);
    release();
    const { cid } = await again;
    expect(cid.equals(earlier.cid)).toBe(true);
    expect(await readBack(store, cid, data)).toBe('whole');
    expect(await store.has(shared)).toBe(true);
    one.keep();
    two.keep();
  });

  it('a block retention is deleting while an import writes it is held once the write resolves', async () => {
    const store = await freshStore();
    const [cid, bytes] = block(raw.code, randomBytes(1000));
    expect(await store.putVerified(cid, bytes)).toBe(true);
    const [file] = await store.files();
    const upload = store.importing();
    // Retention's delete and the import's write in the same turn: the write must not find the block half-deleted.
    const write = async () => {
      await upload.store.put(cid, bytes);
      await upload.written();
    };
    await Promise.all([store.remove(file), write()]);
    expect(await store.has(cid)).toBe(true);
    upload.keep();
  });
});
