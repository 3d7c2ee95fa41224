import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { CID } from 'multiformats/cid';
import * as raw from 'multiformats/codecs/raw';
import { sha256 } from 'multiformats/hashes/sha2';
import { BlockReads } from '../../runtime/blocks/block-reads.js';
import { BlockStore } from '../../runtime/blocks/store.js';

/**
 * A block read that went to the disk sends the reads after it through the thread pool for a
 * while, so a peer asking for blocks no one read lately cannot hold the event loop; reads from
 * memory stay on the event loop, where they cost least. Real files; where a case says so, the
 * clock and the device's read count are the test's.
 */

const dir = mkdtempSync(join(tmpdir(), 'dms-block-reads-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const file = join(dir, 'block');
const bytes = Buffer.from(new Uint8Array(256 * 1024).map((_, i) => i % 251));
writeFileSync(file, bytes);

/**
 * Whether `read` holds the fixture's bytes. Not toEqual: its element-by-element walk of 256 KiB
 * took seconds on two loaded cores, past the 2 s a read that went to the disk keeps reads in the pool.
 */
const same = (read: Uint8Array): boolean => Buffer.from(read.buffer, read.byteOffset, read.byteLength).equals(bytes);

/** Drops the file's pages from the page cache (posix_fadvise DONTNEED, through GNU dd), as if nobody had read it lately. */
function evict(path: string): void {
  execFileSync('dd', [`if=${path}`, 'iflag=nocache', 'count=0', 'status=none']);
}

/** A file of the fixture's bytes, written, synced and evicted: its next read should come from the device. */
function coldFile(name: string): string {
  const path = join(dir, name);
  writeFileSync(path, bytes);
  execFileSync('sync');
  evict(path);
  return path;
}

/**
 * Whether a read of a file just evicted is counted as read from a device: on a disk it is (this
 * project's machines, CI's); a tmpfs /tmp never reads from one, and there the case on the real
 * disk cannot be shown. Eviction is advice the kernel may not take at once, so up to five files.
 */
function deviceReadsCounted(): boolean {
  for (let i = 0; i < 5; i++) {
    const path = coldFile(`probe-${i}`);
    const before = process.resourceUsage().fsRead;
    readFileSync(path);
    if (process.resourceUsage().fsRead > before) return true;
  }
  return false;
}
const onADisk = deviceReadsCounted();

describe('block reads', () => {
  it('reads from memory stay on the event loop', async () => {
    readFileSync(file);
    const reads = new BlockReads();
    for (let i = 0; i < 5; i++) expect(same(await reads.read(file))).toBe(true);
    expect(reads.counts).toEqual({ direct: 5, pooled: 0 });
  });

  it.runIf(onADisk)(`a read the disk served sends the reads after it through the pool (a real file under ${tmpdir()}, evicted from the page cache)`, async () => {
    // Eviction is advice the kernel may not take at once, so fresh files are tried until one is
    // read from the device: the process's real count, as the reads saw it just before and after.
    for (let attempt = 1; attempt <= 10; attempt++) {
      const fresh = coldFile(`fresh-${attempt}`);
      const seen: number[] = [];
      const reads = new BlockReads({ deviceReads: () => seen[seen.push(process.resourceUsage().fsRead) - 1]! });
      expect(same(await reads.read(fresh))).toBe(true);
      if (!(seen.length === 2 && seen[1]! > seen[0]!)) continue;
      expect(same(await reads.read(fresh))).toBe(true);
      expect(reads.counts).toEqual({ direct: 1, pooled: 1 });
      return;
    }
    expect.fail(`none of 10 files written, synced and evicted under ${dir} was read from the device`);
  });

  it('through the pool until the window ends; then the event loop is tried again', async () => {
    let t = 1_000;
    let device = 0;
    const reads = new BlockReads({ pooledForMs: 2_000, now: () => t, deviceReads: () => device });
    expect(same(await reads.read(file))).toBe(true);
    expect(reads.pooled).toBe(false);
    device += 512;
    const cold = new BlockReads({ pooledForMs: 2_000, now: () => t, deviceReads: () => (device += 512) });
    expect(same(await cold.read(file))).toBe(true);
    for (let i = 0; i < 3; i++) expect(same(await cold.read(file))).toBe(true);
    expect(cold.counts).toEqual({ direct: 1, pooled: 3 });
    t += 1_999;
    expect(cold.pooled).toBe(true);
    t += 1;
    expect(cold.pooled).toBe(false);
    expect(same(await cold.read(file))).toBe(true);
    expect(same(await cold.read(file))).toBe(true);
    expect(cold.counts).toEqual({ direct: 2, pooled: 4 });
  });

  it("a store's blocks read through the pool are the same bytes, and a block not held is not_found either way", async () => {
    const block = Buffer.from('a block read through the pool');
    const cid = CID.createV1(raw.code, await sha256.digest(block));
    const missing = CID.createV1(raw.code, await sha256.digest(new TextEncoder().encode('never stored')));
    let device = 0;
    const store = new BlockStore(join(dir, 'store'), new BlockReads({ now: () => 0, deviceReads: () => (device += 1) }));
    await store.open();
    expect(await store.putVerifiedChunks(cid, [block])).toBe(true);
    expect(await store.get(cid)).toEqual(block);
    expect(await store.get(cid)).toEqual(block);
    expect(store.reads.counts).toEqual({ direct: 1, pooled: 1 });
    await expect(store.get(missing)).rejects.toMatchObject({ kind: 'not_found' });
    expect(store.reads.counts.pooled).toBe(2);
    const direct = new BlockStore(join(dir, 'store'), new BlockReads({ deviceReads: () => 0 }));
    await direct.open();
    await expect(direct.get(missing)).rejects.toMatchObject({ kind: 'not_found' });
    expect(direct.reads.counts).toEqual({ direct: 1, pooled: 0 });
  });
});
