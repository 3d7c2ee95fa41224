/**
 * The node's blocks: a filesystem blockstore under `<home>/data/blocks` (one file per block,
 * written to a temporary name and renamed, so a killed process leaves no half block). Every
 * block put here from outside is checked against its CID first.
 */
import { FsBlockstore } from 'blockstore-fs';
import type { CID } from 'multiformats/cid';
import { DmsError } from '../errors.js';
import { blockMatches, cidProblem } from './cid.js';

/** The largest block this node stores or moves: the importer's chunks are 256 KiB, its nodes far smaller. */
export const MAX_BLOCK_BYTES = 1024 * 1024;

export class BlockStore {
  readonly fs: FsBlockstore;
  private opened: Promise<void> | undefined;

  constructor(readonly dir: string) {
    this.fs = new FsBlockstore(dir);
  }

  open(): Promise<void> {
    this.opened ??= this.fs.open();
    return this.opened;
  }

  has(cid: CID): Promise<boolean> {
    return this.fs.has(cid);
  }

  /** The block's bytes; not_found when it is not held. */
  async get(cid: CID): Promise<Uint8Array> {
    const chunks: Uint8Array[] = [];
    try {
      for await (const c of this.fs.get(cid)) chunks.push(c);
    } catch (e) {
      if ((e as { name?: string }).name === 'NotFoundError') throw new DmsError('not_found', `block ${cid} is not held here`);
      throw e;
    }
    return chunks.length === 1 ? chunks[0] : Buffer.concat(chunks);
  }

  /** Stores a block from outside; false (and nothing stored) when it is not the block `cid` names. */
  async putVerified(cid: CID, bytes: Uint8Array): Promise<boolean> {
    if (cidProblem(cid) || bytes.byteLength > MAX_BLOCK_BYTES || !(await blockMatches(cid, bytes))) return false;
    await this.fs.put(cid, bytes);
    return true;
  }
}
