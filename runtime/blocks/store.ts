/**
 * The node's blocks: a filesystem blockstore under `<home>/data/blocks` (one file per block,
 * written to a temporary name and renamed, so a killed process leaves no half block). Every
 * block put here from outside is checked against its CID first. The store knows how many bytes
 * it holds: they count against the node's onboarded storage share (the resource manager).
 */
import { randomBytes } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import { open, readdir, rename, stat, unlink } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { FsBlockstore } from 'blockstore-fs';
import { NextToLast } from 'blockstore-fs/sharding';
import type { CID } from 'multiformats/cid';
import { DmsError } from '../errors.js';
import { chunksMatch } from './cid.js';
import { makeDirsAsync } from '../files.js';

/** The largest block this node stores or moves: the importer's chunks are 256 KiB, its nodes far smaller. */
export const MAX_BLOCK_BYTES = 1024 * 1024;

// FsBlockstore's own default: a block's file is named by its multihash, in a directory of its next-to-last characters.
const sharding = new NextToLast();

export interface BlockFile {
  path: string;
  size: number;
  mtimeMs: number;
}

/**
 * FsBlockstore with the writes and reads a block needs and no more, counting what it adds: a
 * block already held is not written again (its CID names its bytes), a shard directory is made
 * once, a read is one read of the file. The importer and exporter use it as any blockstore.
 */
class CountingBlockstore extends FsBlockstore {
  private readonly made = new Set<string>();

  constructor(
    private readonly root: string,
    private readonly added: (bytes: number) => void,
  ) {
    super(root);
  }

  fileOf(cid: CID): string {
    const { dir, file } = sharding.encode(cid);
    return join(this.root, dir, file);
  }

  override async put(key: CID, val: Uint8Array): Promise<CID> {
    await this.putChunks(key, [val]);
    return key;
  }

  /**
   * A block in the pieces it arrived in, written with one writev: not copied into one buffer
   * first. Creating a file costs the file system most (bench:outputs: ~0.3 ms an open under
   * load), so the writes stay on the thread pool, beside the event loop.
   */
  async putChunks(key: CID, chunks: readonly Uint8Array[]): Promise<void> {
    const file = this.fileOf(key);
    if (existsSync(file)) return;
    const dir = dirname(file);
    if (!this.made.has(dir)) {
      await makeDirsAsync(dir);
      this.made.add(dir);
    }
    const temp = `${file}.${randomBytes(6).toString('hex')}.tmp`;
    const handle = await open(temp, 'w');
    let written = 0;
    try {
      written = (await handle.writev(chunks as Uint8Array[])).bytesWritten;
    } finally {
      await handle.close();
    }
    await rename(temp, file);
    this.added(written);
  }

  /**
   * Looked up and read synchronously: a look-up is one stat of a cached directory entry and a
   * read at most 1 MiB from the page cache, cheaper than the promise API's round trip through
   * the thread pool (bench:outputs: 100-300 µs of the event loop each under load).
   */
  override async has(key: CID): Promise<boolean> {
    return existsSync(this.fileOf(key));
  }

  override async *get(key: CID): AsyncGenerator<Uint8Array> {
    yield await readBlock(this.fileOf(key), key);
  }
}

async function readBlock(file: string, cid: CID): Promise<Uint8Array> {
  try {
    return readFileSync(file);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') throw new DmsError('not_found', `block ${cid} is not held here`);
    throw e;
  }
}

export class BlockStore {
  readonly fs: CountingBlockstore;
  private opened: Promise<void> | undefined;
  /** Bytes of the block files held, measured at open and kept since by what is written and deleted. */
  private held = 0;

  constructor(readonly dir: string) {
    this.fs = new CountingBlockstore(dir, (n) => (this.held += n));
  }

  open(): Promise<void> {
    this.opened ??= (async () => {
      await this.fs.open();
      this.held = (await this.files()).reduce((n, f) => n + f.size, 0);
    })();
    return this.opened;
  }

  /** Bytes held here: what the node's storage share has given to blocks. */
  get bytes(): number {
    return this.held;
  }

  /** Every block file, with its size and age (retention's view). */
  async files(): Promise<BlockFile[]> {
    const names = (await readdir(this.dir, { recursive: true })).filter((n) => n.endsWith('.data'));
    const out: BlockFile[] = [];
    for (const name of names) {
      const path = join(this.dir, name);
      try {
        const st = await stat(path);
        out.push({ path, size: st.size, mtimeMs: st.mtimeMs });
      } catch {
        // Deleted meanwhile.
      }
    }
    return out;
  }

  /** The file holding `cid`'s block. */
  fileOf(cid: CID): string {
    return this.fs.fileOf(cid);
  }

  /** Deletes a block file (retention); false when it was gone already. */
  async remove(file: BlockFile): Promise<boolean> {
    try {
      await unlink(file.path);
    } catch {
      return false;
    }
    this.held = Math.max(0, this.held - file.size);
    return true;
  }

  has(cid: CID): Promise<boolean> {
    return this.fs.has(cid);
  }

  /** Bytes of the block held for `cid` (its file's size). */
  async sizeOf(cid: CID): Promise<number> {
    return (await stat(this.fileOf(cid))).size;
  }

  /** The block's bytes; not_found when it is not held. */
  get(cid: CID): Promise<Uint8Array> {
    return readBlock(this.fileOf(cid), cid);
  }

  /**
   * Stores a block from outside that arrived in pieces (a frame spanning several reads),
   * hashing and writing them as they are; false (and nothing stored) when it is not the block
   * `cid` names.
   */
  async putVerifiedChunks(cid: CID, chunks: readonly Uint8Array[]): Promise<boolean> {
    const length = chunks.reduce((n, c) => n + c.byteLength, 0);
    if (length > MAX_BLOCK_BYTES || !chunksMatch(cid, chunks)) return false;
    await this.fs.putChunks(cid, chunks);
    return true;
  }

  /** Stores a block from outside; false (and nothing stored) when it is not the block `cid` names. */
  putVerified(cid: CID, bytes: Uint8Array): Promise<boolean> {
    return this.putVerifiedChunks(cid, [bytes]);
  }
}
