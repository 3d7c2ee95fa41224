import { utimesSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { randomBytes } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { fileContent, importFile, rootEntry } from '../../runtime/blocks/unixfs.js';
import { collectGarbage } from '../../runtime/blocks/retention.js';
import { CID } from 'multiformats/cid';
import * as raw from 'multiformats/codecs/raw';
import { sha256 } from 'multiformats/hashes/sha2';
import { tempStores } from '../helpers/temp-stores.js';

const freshStore = tempStores('dms-gc-').store;

const files = (dir: string) => readdirSync(dir, { recursive: true }).filter((f) => String(f).endsWith('.data'));

describe('block retention', () => {
  it('deletes blocks no kept root reaches, oldest first, only while over the bound', async () => {
    const store = await freshStore();
    const MiB = 1024 * 1024;
    // Three files of 1 MiB (4 leaves and a root each): kept, old, new.
    const kept = await importFile(Readable.from([randomBytes(MiB)]), store.fs, { maxBytes: MiB });
    const old = await importFile(Readable.from([randomBytes(MiB)]), store.fs, { maxBytes: MiB });
    const past = new Date(Date.now() - 3600_000);
    const before = new Set(files(store.dir));
    for (const f of before) utimesSync(join(store.dir, String(f)), past, past);
    const whole = async (cid: typeof kept.cid) => {
      try {
        let n = 0;
        for await (const c of fileContent(await rootEntry(cid, store.fs))) n += c.length;
        return n === MiB;
      } catch {
        return false;
      }
    };
    const fresh = await importFile(Readable.from([randomBytes(MiB)]), store.fs, { maxBytes: MiB });

    // Under the bound: nothing goes.
    expect((await collectGarbage(store, 10 * MiB, [kept.cid])).deleted).toBe(0);

    // Over it: the old unkept file goes first, and that is enough for a 2.5 MiB bound.
    const got = await collectGarbage(store, 2.5 * MiB, [kept.cid]);
    expect(got.after).toBeLessThanOrEqual(2.5 * MiB);
    expect(got.before - got.after).toBeLessThan(1.5 * MiB);
    expect(await whole(old.cid)).toBe(false);
    expect(await whole(fresh.cid)).toBe(true);
    expect(await whole(kept.cid)).toBe(true);

    // A bound below what the roots keep: everything unkept goes, the kept DAG stays whole.
    await collectGarbage(store, 0, [kept.cid]);
    expect(await whole(fresh.cid)).toBe(false);
    expect(await whole(kept.cid)).toBe(true);
    expect(files(store.dir)).toHaveLength(5);
  });

  it('keeps the blocks an import under way has written, whose root does not exist yet', async () => {
    const store = await freshStore();
    // An upload half-way: its first leaves written, its root not yet.
    const upload = store.importing();
    await upload.store.put(CID.createV1(raw.code, await sha256.digest(new Uint8Array([1, 2, 3]))), new Uint8Array([1, 2, 3]));
    await upload.written();
    await collectGarbage(store, 0, []);
    expect(files(store.dir)).toHaveLength(1);
    // Once it completed its blocks are like any others: unkept, they go.
    upload.keep();
    await collectGarbage(store, 0, []);
    expect(files(store.dir)).toHaveLength(0);
  });
});
