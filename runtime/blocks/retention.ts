/**
 * Retention of blocks (README "Job outputs"): when the block store holds more than its bound,
 * the blocks no kept root reaches are deleted, oldest first, until it is under the bound again.
 * Kept: the DAGs under pinned CIDs and under every CID a result manifest younger than its
 * retention names (what a requester may still fetch), and the blocks an import under way put
 * (BlockStore.importing), whose root does not exist yet: those it wrote and those held before
 * that it names again. A block being fetched meanwhile is at worst fetched again: blocks are
 * files written whole (write-then-rename).
 */
import * as dagPb from '@ipld/dag-pb';
import type { CID } from 'multiformats/cid';
import { DAG_PB_CODEC } from './cid.js';
import type { BlockStore } from './store.js';

export interface Collected {
  /** Bytes of blocks held before and after. */
  before: number;
  after: number;
  deleted: number;
}

/** The files of every block held under `roots`. */
async function reachable(store: BlockStore, roots: Iterable<CID>): Promise<Set<string>> {
  const kept = new Set<string>();
  const queue = [...roots];
  while (queue.length > 0) {
    const cid = queue.pop()!;
    const file = store.fileOf(cid);
    if (kept.has(file) || !(await store.has(cid))) continue;
    kept.add(file);
    if (cid.code === DAG_PB_CODEC) for (const link of dagPb.decode(await store.get(cid)).Links) queue.push(link.Hash);
  }
  return kept;
}

/** Deletes blocks no root reaches, oldest first, while the store holds more than `maxBytes`. */
export async function collectGarbage(store: BlockStore, maxBytes: number, roots: Iterable<CID>): Promise<Collected> {
  const files = await store.files();
  const before = files.reduce((n, f) => n + f.size, 0);
  let after = before;
  let deleted = 0;
  if (before <= maxBytes) return { before, after, deleted };
  const kept = await reachable(store, roots);
  // An import under way (an upload, an output) has no root yet to keep its blocks; store.remove looks again as it deletes.
  for (const f of files.filter((f) => !kept.has(f.path) && !store.importingNow(f.path)).sort((a, b) => a.mtimeMs - b.mtimeMs)) {
    if (after <= maxBytes) break;
    if (await store.remove(f)) {
      after -= f.size;
      deleted++;
    }
  }
  return { before, after, deleted };
}
