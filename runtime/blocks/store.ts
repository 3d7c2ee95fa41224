/**
 * The node's blocks: a filesystem blockstore under `<home>/data/blocks` (one file per block,
 * written to a temporary name and renamed, so a killed process leaves no half block). Every
 * block put here from outside is checked against its CID first. The store knows how many bytes
 * it holds: they count against the node's onboarded storage share (the resource manager).
 *
 * A block is on the disk before the node says it holds it: each file's data is synced before
 * its rename, and the directories renamed into are synced before an import is answered (an
 * upload's CID, a job's signed manifest) or a fetch is done (`syncDirs`). Renamed and not
 * synced, a block acknowledged could be an empty file after a power cut, held by name: never
 * fetched again, served wrong to peers, which note this node for it (kubo's flatfs syncs too).
 */
import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { open, readdir, rename, stat, unlink } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { FsBlockstore } from 'blockstore-fs';
import { NextToLast } from 'blockstore-fs/sharding';
import type { Blockstore } from 'interface-blockstore';
import type { CID } from 'multiformats/cid';
import { DmsError } from '../errors.js';
import { BlockReads } from './block-reads.js';
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
  /** Block files being written now: a second put of one waits for the first, then finds it held. */
  private readonly writing = new Map<string, Promise<number | undefined>>();
  /**
   * Block files an import wrote (ImportSession) that no completed import, fetch, look-up or read
   * has needed since: deleted once every import under way that put them has failed.
   */
  private readonly provisional = new Set<string>();
  /**
   * The imports under way that put each block file, whether they wrote it or found it held: two
   * uploads of one file write the same blocks, and one that fails may not delete what the other
   * will name, nor may retention take a block held long ago that an import under way now names.
   */
  private readonly sharers = new Map<string, Set<symbol>>();
  /** Block files being deleted (drop): not held. */
  private readonly deleting = new Set<string>();
  /** Directories a block file was renamed into, or a shard directory made in, since they were last synced. */
  private readonly unsyncedDirs = new Set<string>();
  /** Syncs of directories under way: a sync asked meanwhile waits for them too (it may need a directory one of them took). */
  private readonly dirSyncs = new Set<Promise<void>>();

  constructor(
    private readonly root: string,
    private readonly added: (bytes: number) => void,
    private readonly reads: BlockReads,
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
  async putChunks(key: CID, chunks: readonly Uint8Array[], byImport = false): Promise<void> {
    const file = this.fileOf(key);
    for (let pending = this.writing.get(file); pending; pending = this.writing.get(file)) await pending.catch(() => undefined);
    if (existsSync(file)) {
      if (!byImport) this.needed(file);
      return;
    }
    const write = this.write(file, chunks);
    this.writing.set(file, write);
    try {
      this.added(await write);
    } finally {
      if (this.writing.get(file) === write) this.writing.delete(file);
    }
    if (byImport) this.provisional.add(file);
  }

  /**
   * Deletes a block file; resolves with its bytes (undefined when it was gone). While it goes, a
   * put of the block waits and writes it again, and it is not held: a put that found the file
   * just before the unlink would have taken a block that was about to go for held.
   */
  drop(file: string): Promise<number | undefined> {
    const gone = (async () => {
      const { size } = await stat(file);
      await unlink(file);
      return size;
    })().catch(() => undefined);
    this.deleting.add(file);
    const done = gone.finally(() => {
      this.deleting.delete(file);
      if (this.writing.get(file) === done) this.writing.delete(file);
    });
    this.writing.set(file, done);
    return done;
  }

  /** A held block something other than an import under way needs: no failed import deletes it. */
  needed(file: string): void {
    this.provisional.delete(file);
  }

  /** An import under way puts this block: before it waits for any write, so no discard or collection takes the block meanwhile. */
  share(file: string, by: symbol): void {
    const sessions = this.sharers.get(file);
    if (sessions) sessions.add(by);
    else this.sharers.set(file, new Set([by]));
  }

  /** An import under way no longer puts this block; true when it was an import's own and no import under way needs it now. */
  unshare(file: string, by: symbol): boolean {
    const sessions = this.sharers.get(file);
    sessions?.delete(by);
    if (sessions?.size) return false;
    this.sharers.delete(file);
    return this.provisional.has(file);
  }

  /** Whether an import under way put this block file. */
  shared(file: string): boolean {
    return this.sharers.has(file);
  }

  private async write(file: string, chunks: readonly Uint8Array[]): Promise<number> {
    const dir = dirname(file);
    if (!this.made.has(dir)) {
      await makeDirsAsync(dir);
      this.made.add(dir);
      // Its entry in the store's root (the shard directories are one level below it), and the
      // root's own in its parent: the store made its root when it first opened.
      this.unsyncedDirs.add(this.root);
      this.unsyncedDirs.add(dirname(this.root));
    }
    const temp = `${file}.${randomBytes(6).toString('hex')}.tmp`;
    const handle = await open(temp, 'w');
    let written = 0;
    try {
      written = (await handle.writev(chunks as Uint8Array[])).bytesWritten;
      await handle.datasync();
    } finally {
      await handle.close();
    }
    await rename(temp, file);
    this.unsyncedDirs.add(dir);
    return written;
  }

  /**
   * Syncs every directory a block was renamed into since the last sync, and waits for syncs
   * under way: the blocks written before it resolves are on the disk by name too.
   */
  async syncDirs(): Promise<void> {
    const dirs = [...this.unsyncedDirs];
    this.unsyncedDirs.clear();
    if (dirs.length > 0) {
      const sync = syncEach(dirs);
      this.dirSyncs.add(sync);
      sync.then(
        () => this.dirSyncs.delete(sync),
        () => this.dirSyncs.delete(sync),
      );
    }
    await Promise.all([...this.dirSyncs]);
  }

  /**
   * Looked up synchronously: one stat of a cached directory entry, cheaper than the promise
   * API's round trip through the thread pool (bench:outputs: 100-300 µs of the event loop each
   * under load). Read as BlockReads decides: on the event loop while the disk answers from memory.
   */
  override async has(key: CID): Promise<boolean> {
    const file = this.fileOf(key);
    if (this.deleting.has(file) || !existsSync(file)) return false;
    this.needed(file);
    return true;
  }

  override async *get(key: CID): AsyncGenerator<Uint8Array> {
    const file = this.fileOf(key);
    this.needed(file);
    yield await readBlock(this.reads, file, key);
  }
}

/** Directories synced at once (each a trip through libuv's pool). */
const DIR_SYNCS_AT_ONCE = 8;

async function syncEach(dirs: readonly string[]): Promise<void> {
  let next = 0;
  const worker = async () => {
    while (next < dirs.length) {
      const handle = await open(dirs[next++], 'r');
      try {
        await handle.sync();
      } catch (e) {
        // A file system that cannot sync a directory (EINVAL) keeps its names as it keeps them.
        if ((e as NodeJS.ErrnoException).code !== 'EINVAL') throw e;
      } finally {
        await handle.close();
      }
    }
  };
  await Promise.all(Array.from({ length: Math.min(DIR_SYNCS_AT_ONCE, dirs.length) }, worker));
}

async function readBlock(reads: BlockReads, file: string, cid: CID): Promise<Uint8Array> {
  try {
    return await reads.read(file);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') throw new DmsError('not_found', `block ${cid} is not held here`);
    throw e;
  }
}

/**
 * How far an import's writes run ahead of it. A tar is read in order, one entry at a time, and
 * each block is five trips through libuv's pool (open, write, sync, close, rename): waited for
 * one by one, an output of 50,000 small files took 50 s, the event loop idle 71 % of it. Puts
 * that return once their write is under way keep the pool busy; the bytes bound what the
 * blocks waiting to be written hold in memory.
 */
const WRITES_AHEAD = { count: 64, bytes: 8 * 1024 * 1024 };

/** One import's view of the store (BlockStore.importing). */
export interface ImportSession {
  /** What the importer writes to: a put resolves once its write is under way (see WRITES_AHEAD). */
  store: Pick<Blockstore, 'put'>;
  /** Resolves once every block put is written, or rejects with the first write that failed. */
  written(): Promise<void>;
  /** The import completed: its blocks are the store's like any others. */
  keep(): void;
  /** The import failed: its blocks nothing else needs are deleted. */
  discard(): Promise<void>;
}

export class BlockStore {
  readonly fs: CountingBlockstore;
  private opened: Promise<void> | undefined;
  /** Bytes of the block files held, measured at open and kept since by what is written and deleted. */
  private held = 0;

  /** @param reads how block files are read (BlockReads' defaults unless a test says otherwise) */
  constructor(
    readonly dir: string,
    readonly reads = new BlockReads(),
  ) {
    this.fs = new CountingBlockstore(dir, (n) => (this.held += n), reads);
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

  /**
   * A store for one import of content from outside (an upload): `keep()` once it completed;
   * `discard()` when it did not deletes the blocks it wrote that nothing else came to need
   * meanwhile, nor another import under way put too (that one deletes them if it fails as well).
   * Its blocks counted against the storage share for good: an upload cut at what is free (413),
   * refused or dropped by its client left what it had written, which no pin or manifest names,
   * so only retention (off by default) would ever delete it, and a few such uploads kept the
   * share full.
   */
  importing(): ImportSession {
    const session = Symbol('import');
    const fs = this.fs;
    const put = new Set<string>();
    // The writes under way, and the bytes they hold: a put returns once its write is under way
    // and the import goes on, waiting only while too many are (see WRITES_AHEAD). Each is held
    // as a promise that settles, never rejecting, once the write is over and counted out.
    const inFlight = new Set<Promise<void>>();
    let bytesInFlight = 0;
    // The first write that failed: the import fails with it, at its next put or at its end.
    let failed: { error: unknown } | undefined;
    const rethrow = () => {
      if (failed) throw failed.error;
    };
    let discarded = false;
    return {
      store: {
        put: async (key: CID, val: Uint8Array) => {
          if (discarded) throw new DmsError('conflict', 'the import was given up');
          rethrow();
          const file = fs.fileOf(key);
          if (!put.has(file)) {
            put.add(file);
            fs.share(file, session);
          }
          bytesInFlight += val.byteLength;
          const over: Promise<void> = fs
            .putChunks(key, [val], true)
            .then(
              () => undefined,
              (error: unknown) => void (failed ??= { error }),
            )
            .finally(() => {
              inFlight.delete(over);
              bytesInFlight -= val.byteLength;
            });
          inFlight.add(over);
          while (inFlight.size > WRITES_AHEAD.count || bytesInFlight > WRITES_AHEAD.bytes) await Promise.race(inFlight);
          rethrow();
          return key;
        },
      },
      written: async () => {
        await Promise.all(inFlight);
        rethrow();
      },
      keep: () => {
        for (const file of put) {
          fs.unshare(file, session);
          // A completed import names it: no other import's failure deletes it.
          fs.needed(file);
        }
      },
      discard: async () => {
        discarded = true;
        await Promise.all(inFlight);
        for (const file of put) {
          if (!fs.unshare(file, session)) continue;
          fs.needed(file);
          this.held = Math.max(0, this.held - ((await fs.drop(file)) ?? 0));
        }
      },
    };
  }

  /**
   * Runs one import of content from outside (`fn` writes to the store it is given) as an
   * ImportSession: its blocks are kept once it resolves, and those nothing else came to need are
   * deleted when it rejects, with the same error.
   */
  async importAll<T>(fn: (store: ImportSession['store']) => Promise<T>): Promise<T> {
    const session = this.importing();
    try {
      const result = await fn(session.store);
      // On the disk before its CID is answered or signed.
      await session.written();
      await this.fs.syncDirs();
      session.keep();
      return result;
    } catch (e) {
      await session.discard();
      throw e;
    }
  }

  /** Makes every block written so far durable by name (see the module's comment). */
  syncDirs(): Promise<void> {
    return this.fs.syncDirs();
  }

  /** Whether an import under way put this block file, written by it or held before (retention leaves it). */
  importingNow(file: string): boolean {
    return this.fs.shared(file);
  }

  /**
   * Deletes a block file (retention); false when it was gone already, or an import under way
   * came to put it since retention listed it.
   */
  async remove(file: BlockFile): Promise<boolean> {
    if (this.importingNow(file.path)) return false;
    const size = await this.fs.drop(file.path);
    if (size === undefined) return false;
    this.held = Math.max(0, this.held - size);
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
    return readBlock(this.reads, this.fileOf(cid), cid);
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
