/**
 * A block is on the disk before the node says it holds it (runtime/blocks/store.ts). Renamed
 * into place without a sync, an uploaded file answered with its CID, or a job output whose
 * manifest was signed, could come back from a power cut as empty files, held by name: never
 * fetched again, and served wrong. A power cut cannot be made here, so the syncs themselves are
 * watched: FileHandle's own methods, wrapped to count each call and still called through to
 * the disk.
 */
import { open, type FileHandle } from 'node:fs/promises';
import { dirname } from 'node:path';
import { Readable } from 'node:stream';
import { fileURLToPath } from 'node:url';
import { randomBytes } from 'node:crypto';
import * as tar from 'tar-stream';
import { describe, expect, it } from 'vitest';
import { importFile, importTar } from '../../runtime/blocks/unixfs.js';
import { tempStores } from '../helpers/temp-stores.js';

const openStore = tempStores('dms-durable-').store;

/** The prototype every FileHandle shares (node:fs/promises does not export the class). */
async function fileHandlePrototype(): Promise<FileHandle> {
  const probe = await open(fileURLToPath(import.meta.url), 'r');
  await probe.close();
  return Object.getPrototypeOf(probe) as FileHandle;
}

type SyncMethod = 'datasync' | 'sync';

/**
 * Runs `fn` with FileHandle's `method` wrapped: `before` is awaited on each call, which then goes
 * on to the real method. Put back whatever `fn` does.
 */
async function wrapping<T>(method: SyncMethod, before: (handle: FileHandle) => unknown, fn: () => Promise<T>): Promise<T> {
  const proto = await fileHandlePrototype();
  const real = proto[method];
  proto[method] = async function (this: FileHandle) {
    await before(this);
    return real.call(this);
  };
  try {
    return await fn();
  } finally {
    proto[method] = real;
  }
}

describe('blocks on the disk before they are acknowledged', () => {
  it('an import resolves only once each block file’s data and each directory it was renamed into are synced', async () => {
    const store = await openStore();
    const dataSynced: number[] = [];
    const dirsSynced: number[] = [];
    // 1 MiB and a little more: five 256 KiB leaves and their root, in several shard directories.
    const imported = await wrapping(
      'datasync',
      (h) => dataSynced.push(h.fd),
      () =>
        wrapping(
          'sync',
          (h) => dirsSynced.push(h.fd),
          () => store.importAll((s) => importFile(Readable.from([randomBytes(5 * 256 * 1024 + 7)]), s, { maxBytes: 8 * 1024 * 1024 })),
        ),
    );
    const files = await store.files();
    expect(imported.size).toBe(5 * 256 * 1024 + 7);
    expect(files.length).toBe(7);
    expect(dataSynced.length, 'each block file written had its data synced').toBe(files.length);
    const shardDirs = new Set(files.map((f) => dirname(f.path)));
    // Each shard directory and the store's root (its entries), once each at the least.
    expect(dirsSynced.length, `directories synced, for ${shardDirs.size} shard directories and the root`).toBeGreaterThanOrEqual(shardDirs.size + 1);
  });

  it('syncDirs waits for a sync another caller began, of directories it took first', async () => {
    const store = await openStore();
    await importFile(Readable.from([randomBytes(1000)]), store.fs, { maxBytes: 1 << 20 });
    let release!: () => void;
    const held = new Promise<void>((r) => (release = r));
    await wrapping(
      'sync',
      () => held,
      async () => {
        const first = store.syncDirs();
        let secondDone = false;
        // The second finds nothing of its own to sync: it still waits for the first's.
        const second = store.syncDirs().then(() => (secondDone = true));
        await new Promise((r) => setTimeout(r, 50));
        expect(secondDone).toBe(false);
        release();
        await Promise.all([first, second]);
        expect(secondDone).toBe(true);
      },
    );
  });
});

/** A tar of `n` small files of different bytes. */
function tarOfFiles(n: number): Readable {
  const pack = tar.pack();
  for (let i = 0; i < n; i++) pack.entry({ name: `out/f${i}` }, `file ${i}\n`);
  pack.finalize();
  return pack as unknown as Readable;
}

describe('an import writing ahead of itself', () => {
  it('keeps several blocks’ writes under way at once, and resolves only once all are on the disk', async () => {
    const store = await openStore();
    let syncing = 0;
    let most = 0;
    let done = 0;
    const imported = await wrapping(
      'datasync',
      async () => {
        most = Math.max(most, ++syncing);
        await new Promise((r) => setTimeout(r, 20));
        syncing--;
        done++;
      },
      // Forty small files in a tar, read in order, one entry at a time: one by one, 800 ms of waiting on the syncs alone.
      () => store.importAll((s) => importTar(tarOfFiles(40), s, { maxBytes: 16 * 1024 * 1024 })),
    );
    expect(imported.kind).toBe('directory');
    expect(most, 'block writes under way at once').toBeGreaterThan(1);
    expect(done, 'every write finished before the import resolved').toBe((await store.files()).length);
  });

  it('fails with the first write that failed, though the import had gone on past it, and leaves none of its blocks', async () => {
    const store = await openStore();
    let calls = 0;
    const failed = await wrapping(
      'datasync',
      () => {
        if (++calls === 5) throw Object.assign(new Error('ENOSPC: no space left on device, datasync'), { code: 'ENOSPC' });
      },
      () => store.importAll((s) => importTar(tarOfFiles(40), s, { maxBytes: 16 * 1024 * 1024 })).then(() => null, (e: unknown) => e as Error),
    );
    expect(failed?.message).toContain('ENOSPC');
    expect(await store.files()).toEqual([]);
    expect(store.bytes).toBe(0);
  });
});

