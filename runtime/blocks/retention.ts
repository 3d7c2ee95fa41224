/**
 * Retention of blocks (README "Job outputs"): when the block store holds more than its bound,
 * the blocks no kept root reaches are deleted, oldest first, until it is under the bound again.
 * Kept: the DAGs under pinned CIDs and under every CID a result manifest younger than its
 * retention names (what a requester may still fetch). A block being written meanwhile is at
 * worst fetched again: blocks are files written whole (write-then-rename).
 */
import { readdir, stat, unlink } from 'node:fs/promises';
import { join } from 'node:path';
import * as dagPb from '@ipld/dag-pb';
import { NextToLast } from 'blockstore-fs/sharding';
import type { CID } from 'multiformats/cid';
import { DAG_PB_CODEC } from './cid.js';
import type { BlockStore } from './store.js';

export interface Collected {
  /** Bytes of blocks held before and after. */
  before: number;
  after: number;
  deleted: number;
}

// FsBlockstore's own default: a block's file is named by its multihash.
const sharding = new NextToLast();
const fileOf = (store: BlockStore, cid: CID): string => {
  const { dir, file } = sharding.encode(cid);
  return join(store.dir, dir, file);
};

/** Every block file under the store, with its size and age. */
async function blockFiles(dir: string): Promise<{ path: string; size: number; mtimeMs: number }[]> {
  const names = (await readdir(dir, { recursive: true })).filter((n) => n.endsWith('.data'));
  const out = [];
  for (const name of names) {
    const path = join(dir, name);
    try {
      const st = await stat(path);
      out.push({ path, size: st.size, mtimeMs: st.mtimeMs });
    } catch {
      // Deleted meanwhile.
    }
  }
  return out;
}

/** The files of every block held under `roots`. */
async function reachable(store: BlockStore, roots: Iterable<CID>): Promise<Set<string>> {
  const kept = new Set<string>();
  const queue = [...roots];
  while (queue.length > 0) {
    const cid = queue.pop()!;
    const file = fileOf(store, cid);
    if (kept.has(file) || !(await store.has(cid))) continue;
    kept.add(file);
    if (cid.code === DAG_PB_CODEC) for (const link of dagPb.decode(await store.get(cid)).Links) queue.push(link.Hash);
  }
  return kept;
}

/** Deletes blocks no root reaches, oldest first, while the store holds more than `maxBytes`. */
export async function collectGarbage(store: BlockStore, maxBytes: number, roots: Iterable<CID>): Promise<Collected> {
  const files = await blockFiles(store.dir);
  const before = files.reduce((n, f) => n + f.size, 0);
  let after = before;
  let deleted = 0;
  if (before <= maxBytes) return { before, after, deleted };
  const kept = await reachable(store, roots);
  for (const f of files.filter((f) => !kept.has(f.path)).sort((a, b) => a.mtimeMs - b.mtimeMs)) {
    if (after <= maxBytes) break;
    try {
      await unlink(f.path);
      after -= f.size;
      deleted++;
    } catch {
      // Gone already.
    }
  }
  return { before, after, deleted };
}
