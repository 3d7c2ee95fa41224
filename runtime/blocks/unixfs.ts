/**
 * UnixFS in and out of the block store: a tar stream or a single file becomes a DAG (CIDv1,
 * sha2-256, raw leaves: what `ipfs add --cid-version 1 --raw-leaves` makes, so any IPFS tool
 * checks it), and a DAG becomes a tar stream or the file's bytes again. Entries carry no mode
 * or time, so the same files give the same CID wherever and whenever they are imported.
 *
 * A tar is a stranger's: an entry naming an absolute path or `..`, a path deeper than
 * MAX_PATH_DEPTH, a path another entry has as a file where this one needs a directory (or the
 * reverse), a link (symbolic or hard) leaving the archive's root, a name that is not UTF-8, or
 * anything but a regular file or a directory is refused with its name, and the whole import with it.
 */
import { lstat, readdir } from 'node:fs/promises';
import { createReadStream } from 'node:fs';
import { posix, join } from 'node:path';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import type { Blockstore } from 'interface-blockstore';
import { importer, type ImportCandidate, type ImporterOptions } from 'ipfs-unixfs-importer';
import { exporter, type UnixFSEntry } from 'ipfs-unixfs-exporter';
import * as tar from 'tar-stream';
import type { CID } from 'multiformats/cid';
import { DmsError, invalid } from '../errors.js';
import { formatBytes } from '../bytes.js';

/** What an import writes to: a block store, or one import's view of it (BlockStore.importing). */
export type WritableStore = Pick<Blockstore, 'put'>;

export interface Imported {
  cid: CID;
  /** Bytes of file content in it. */
  size: number;
  kind: 'file' | 'directory';
}

export interface ImportLimits {
  /** Most bytes of file content: too_large past it, before more is read. */
  maxBytes: number;
  /** Most entries (files and directories) in one tar. */
  maxEntries?: number;
}

export const DEFAULT_MAX_ENTRIES = 100_000;

/**
 * Most components in a path below the root. The importer builds and flushes directories by
 * recursing once per level: about 2,000 levels overflow Node's stack, and V8 then writes the
 * whole bundled source to stderr for each promise it rejects (~0.9 MB of log from a 10 KB tar).
 * Trees people and tools make stay in the tens of levels (PATH_MAX, 4,096 bytes, allows about
 * 2,000 one-letter ones, but nothing real comes near), so 256 refuses none of them and keeps
 * any recursion over a path a few hundred frames deep, whoever chose the path.
 */
export const MAX_PATH_DEPTH = 256;

/** The importer's settings every import uses: changing one changes every CID. */
const IMPORT: ImporterOptions = {
  cidVersion: 1,
  rawLeaves: true,
  reduceSingleLeafToSelf: true,
  // One entry's content read at a time: a tar stream can only be read in order.
  fileImportConcurrency: 1,
};

const shown = (s: string) => (s.length > 200 ? `${s.slice(0, 200)}…` : s);

/** What a UTF-8 decoder puts in place of bytes that are not UTF-8. */
const REPLACED = '\uFFFD';

/**
 * The entry's path inside the archive, normalised ('' for the root itself); refuses an
 * absolute path or one climbing out with `..`.
 */
export function entryPath(name: string): string {
  // The archive's bytes were read as UTF-8 (tar-stream reads a PAX path no other way): a name
  // that is not UTF-8 came out with U+FFFD in place of its bytes, and stored so it would come back
  // as another name, or as the name of another entry, whose bytes it no longer tells apart.
  if (name.includes(REPLACED)) throw invalid(`tar entry '${shown(name)}': its name is not UTF-8 text, and UnixFS names are`);
  if (name.startsWith('/') || /^[A-Za-z]:[\\/]/.test(name)) throw invalid(`tar entry '${shown(name)}': absolute paths are refused`);
  const parts: string[] = [];
  for (const part of name.split('/')) {
    if (part === '' || part === '.') continue;
    if (part === '..') throw invalid(`tar entry '${shown(name)}': paths with '..' are refused`);
    parts.push(part);
  }
  return parts.join('/');
}

const depthOf = (path: string): number => (path === '' ? 0 : path.split('/').length);

/**
 * What each path of a tar is, as its entries arrive: the importer keeps one of a file and a
 * directory given the same path and drops the other without a word (a file `a` and `a/b`, in
 * either order; a directory named again after its files, with them), so a conflict is refused
 * with the entry's name, as a name given twice is.
 */
class Paths {
  private readonly kinds = new Map<string, 'file' | 'dir'>();

  /** Records `path` (after any strip) of entry `name`; false for a directory already known (to give to the importer again would empty it). */
  add(path: string, kind: 'file' | 'dir', name: string): boolean {
    const had = this.kinds.get(path);
    if (had === 'file') throw invalid(kind === 'file' ? `tar entry '${shown(name)}' appears twice` : `tar entry '${shown(name)}' is a directory, but the archive has a file '${shown(name)}'`);
    if (had === 'dir') {
      if (kind === 'file') throw invalid(`tar entry '${shown(name)}' is a file, but the archive has a directory '${shown(name)}'`);
      return false;
    }
    // Up to the first directory already known: everything above it was recorded with it.
    const stripped = name.length - path.length;
    for (let up = path; up !== '';) {
      const cut = up.lastIndexOf('/');
      up = cut < 0 ? '' : up.slice(0, cut);
      const k = this.kinds.get(up);
      if (k === 'dir') break;
      if (k === 'file') {
        if (up === '') throw invalid(`tar entry '${shown(name)}' follows a file at the root`);
        throw invalid(`tar entry '${shown(name)}' is inside '${shown(name.slice(0, stripped + up.length))}', which the archive has as a file`);
      }
      this.kinds.set(up, 'dir');
    }
    this.kinds.set(path, kind);
    return true;
  }
}

/** Refuses a link: one leaving the root is named as such, any other is not stored (UnixFS outputs hold files and directories). */
function refuseLink(path: string, type: string, target: string): never {
  const kind = type === 'symlink' ? 'symlink' : 'hard link';
  // A symbolic link is read from its own directory, a hard link from the archive's root.
  const resolved = posix.normalize(type === 'symlink' ? posix.join(posix.dirname(path), target) : target);
  if (target.startsWith('/') || resolved === '..' || resolved.startsWith('../')) {
    throw invalid(`tar entry '${shown(path)}': ${kind} to '${shown(target)}' leaves the archive's root`);
  }
  throw invalid(`tar entry '${shown(path)}': ${kind} to '${shown(target)}' refused: only regular files and directories are stored`);
}

class Budget {
  bytes = 0;
  entries = 0;
  constructor(private readonly limits: ImportLimits) {}
  entry(): void {
    const max = this.limits.maxEntries ?? DEFAULT_MAX_ENTRIES;
    if (++this.entries > max) throw new DmsError('too_large', `more than ${max} entries`);
  }
  add(n: number): void {
    this.bytes += n;
    if (this.bytes > this.limits.maxBytes) throw new DmsError('too_large', `content is larger than the limit of ${formatBytes(this.limits.maxBytes)}`);
  }
}

async function* counted(source: AsyncIterable<unknown>, budget: Budget): AsyncGenerator<Uint8Array> {
  for await (const chunk of source as AsyncIterable<Uint8Array>) {
    budget.add(chunk.byteLength);
    yield chunk;
  }
}

/** The root of an import: the one entry the importer yields last, at the path given to the root. */
async function rootOf(candidates: AsyncIterable<ImportCandidate> | Iterable<ImportCandidate>, store: WritableStore, wrap: boolean): Promise<CID | undefined> {
  let root: CID | undefined;
  for await (const entry of importer(candidates, store, { ...IMPORT, wrapWithDirectory: wrap })) {
    if (!wrap || entry.path === '' || entry.path === undefined) root = entry.cid;
  }
  return root;
}

/**
 * Imports a tar stream. `strip` leading path components are dropped first (docker's archive of
 * `/outputs` names its entries `outputs/…`): when what is left is a single file at the root,
 * the import is that file, otherwise a directory.
 */
export async function importTar(source: AsyncIterable<Uint8Array> | Readable, store: WritableStore, limits: ImportLimits, strip = 0): Promise<Imported> {
  const budget = new Budget(limits);
  const extract = tar.extract();
  const input = source instanceof Readable ? source : Readable.from(source);
  const fed = pipeline(input, extract).catch((e: unknown) => {
    extract.destroy(e as Error);
  });
  let single: CID | undefined;
  const paths = new Paths();
  async function* candidates(): AsyncGenerator<ImportCandidate> {
    for await (const entry of extract) {
      const h = entry.header;
      budget.entry();
      const full = entryPath(h.name);
      const depth = depthOf(full);
      if (depth > MAX_PATH_DEPTH) throw invalid(`tar entry '${shown(full)}' has ${depth} path components: at most ${MAX_PATH_DEPTH} are stored`);
      const path = full.split('/').slice(strip).join('/');
      if (h.type === 'symlink' || h.type === 'link') refuseLink(full, h.type, h.linkname ?? '');
      if (h.type === 'directory') {
        entry.resume();
        if (paths.add(path, 'dir', full) && path !== '') yield { path };
        continue;
      }
      if (h.type !== 'file' && h.type !== 'contiguous-file') throw invalid(`tar entry '${shown(full)}': a ${h.type} is refused: only regular files and directories are stored`);
      paths.add(path, 'file', full);
      if (path === '') {
        // The archived path was itself a file: it is the import, and nothing else may follow.
        single = await rootOf([{ content: counted(entry, budget) }], store, false);
        continue;
      }
      yield { path, content: counted(entry, budget) };
    }
  }
  try {
    const root = await rootOf(candidates(), store, true);
    await fed;
    if (single) return { cid: single, size: budget.bytes, kind: 'file' };
    if (!root) throw invalid('the archive holds no file or directory');
    return { cid: root, size: budget.bytes, kind: 'directory' };
  } catch (e) {
    input.destroy();
    extract.destroy();
    if (e instanceof DmsError) throw e;
    throw invalid(`not a readable tar archive: ${(e as Error).message}`);
  }
}

/** Imports the bytes of one file. */
export async function importFile(source: AsyncIterable<Uint8Array>, store: WritableStore, limits: ImportLimits): Promise<Imported> {
  const budget = new Budget(limits);
  const cid = await rootOf([{ content: counted(source, budget) }], store, false);
  return { cid: cid!, size: budget.bytes, kind: 'file' };
}

/**
 * Imports a file or directory on this machine as a tar of it would be: what `dms jobs get`
 * checks the written files against, and what `dms put` announces before it uploads.
 * Links are refused as they are in a tar.
 */
export async function importPath(path: string, store: WritableStore, limits: ImportLimits): Promise<Imported> {
  const st = await lstat(path);
  if (st.isFile()) return importFile(createReadStream(path), store, limits);
  if (!st.isDirectory()) throw invalid(`${path}: only regular files and directories are stored`);
  const budget = new Budget(limits);
  // A job writes the directories it outputs: depth first with a stack of our own, not a
  // generator per level, and no deeper than a tar may be.
  async function* walk(): AsyncGenerator<ImportCandidate> {
    const stack = [{ dir: path, rel: '', names: (await readdir(path)).sort(), next: 0 }];
    while (stack.length > 0) {
      const top = stack[stack.length - 1];
      if (top.next === top.names.length) {
        stack.pop();
        continue;
      }
      const name = top.names[top.next++];
      const abs = join(top.dir, name);
      if (name.includes(REPLACED)) throw invalid(`${abs}: its name is not UTF-8 text, and UnixFS names are`);
      const p = top.rel ? `${top.rel}/${name}` : name;
      const s = await lstat(abs);
      budget.entry();
      if (stack.length > MAX_PATH_DEPTH) throw invalid(`${abs}: ${stack.length} levels below ${path}: at most ${MAX_PATH_DEPTH} are stored`);
      if (s.isSymbolicLink()) throw invalid(`${abs}: links are not stored`);
      if (s.isDirectory()) {
        yield { path: p };
        stack.push({ dir: abs, rel: p, names: (await readdir(abs)).sort(), next: 0 });
      } else if (s.isFile()) yield { path: p, content: counted(createReadStream(abs), budget) };
      else throw invalid(`${abs}: only regular files and directories are stored`);
    }
  }
  const root = await rootOf(walk(), store, true);
  if (!root) throw invalid(`${path}: an empty directory holds nothing to store`);
  return { cid: root, size: budget.bytes, kind: 'directory' };
}

export interface ExportOptions {
  signal?: AbortSignal;
  /** How many blocks of a file are read ahead at once (each may come over the network). */
  blockReadConcurrency?: number;
}

/** The DAG's root entry: a file (raw or UnixFS file) or a directory. */
export async function rootEntry(cid: CID, store: Blockstore, opts: ExportOptions = {}): Promise<UnixFSEntry> {
  const entry = await exporter(cid, store, { signal: opts.signal });
  if (entry.type !== 'file' && entry.type !== 'raw' && entry.type !== 'directory') throw invalid(`${cid} is a ${entry.type}, not a UnixFS file or directory`);
  return entry;
}

export const isFileEntry = (e: UnixFSEntry): boolean => e.type === 'file' || e.type === 'raw';

/** A file's bytes, in order, optionally a range of them. */
export function fileContent(entry: UnixFSEntry, opts: ExportOptions & { offset?: number; length?: number } = {}): AsyncIterable<Uint8Array> {
  if (entry.type !== 'file' && entry.type !== 'raw') throw invalid(`${entry.cid} is a directory, not a file`);
  return entry.content({ signal: opts.signal, offset: opts.offset, length: opts.length, blockReadConcurrency: opts.blockReadConcurrency }) as AsyncIterable<Uint8Array>;
}

/** How much a tar of a DAG may hold: links that repeat a block make files of any number and size. */
export interface TarBounds {
  /** Bytes of file content in all. */
  maxBytes: number;
  /** Files and directories in all. */
  maxEntries: number;
}

/**
 * The DAG as a tar stream: a directory's entries below it (paths relative to it), or a file as
 * one entry named `name`. Past `bounds` the stream ends with a too_large error, each file's
 * size counted before a byte of it is sent.
 */
export function exportTar(cid: CID, store: Blockstore, name: string, opts: ExportOptions = {}, bounds?: TarBounds): Readable {
  const pack = tar.pack();
  let bytes = 0;
  let entries = 0;
  const count = (size: number) => {
    bytes += size;
    entries++;
    if (bounds && (bytes > bounds.maxBytes || entries > bounds.maxEntries)) {
      const past = bytes > bounds.maxBytes ? `${bounds.maxBytes} bytes of files` : `${bounds.maxEntries} entries`;
      throw new DmsError('too_large', `${cid} holds more than ${past}`);
    }
  };
  const write = async () => {
    const root = await rootEntry(cid, store, opts);
    if (isFileEntry(root)) {
      count(Number(root.size));
      await pipeline(Readable.from(fileContent(root, opts)), pack.entry({ name, size: Number(root.size), mode: 0o644 }));
    } else {
      for await (const { entry, path } of walk(root, '', store, opts)) {
        if (entry.type === 'directory') {
          count(0);
          pack.entry({ name: path, type: 'directory', mode: 0o755 });
        } else {
          count(Number(entry.size));
          await pipeline(Readable.from(fileContent(entry, opts)), pack.entry({ name: path, size: Number(entry.size), mode: 0o644 }));
        }
      }
    }
    pack.finalize();
  };
  write().catch((e: unknown) => pack.destroy(e as Error));
  // tar-stream's streams are streamx's: a Node stream of them for pipes and web streams.
  return Readable.from(pack as unknown as AsyncIterable<Buffer>, { objectMode: false });
}

/**
 * Every entry below a directory, depth first, each directory before what it holds, with its
 * path relative to the root. A DAG fetched from another node may nest directories without end:
 * the levels are a stack of our own, not a generator each (a chain of them overflowed the stack
 * at 3,000), and no deeper than an import makes.
 */
export async function* walk(dir: UnixFSEntry, prefix: string, store: Blockstore, opts: ExportOptions = {}): AsyncGenerator<{ entry: UnixFSEntry; path: string }> {
  if (dir.type !== 'directory') return;
  const base = depthOf(prefix);
  const stack = [{ children: dir.entries({ signal: opts.signal })[Symbol.asyncIterator](), prefix }];
  try {
    while (stack.length > 0) {
      const top = stack[stack.length - 1];
      const next = await top.children.next();
      if (next.done) {
        stack.pop();
        continue;
      }
      const child = next.value;
      const path = top.prefix ? `${top.prefix}/${child.name}` : child.name;
      if (base + stack.length > MAX_PATH_DEPTH) throw invalid(`directory entry '${shown(path)}' is deeper than ${MAX_PATH_DEPTH} levels`);
      // A name is a stranger's too (a DAG fetched from another node): it must stay below the root.
      if (entryPath(path) !== path) throw invalid(`directory entry '${shown(path)}' is not a plain relative name`);
      const entry = await exporter(child.cid, store, { signal: opts.signal });
      if (entry.type === 'directory') {
        yield { entry, path };
        stack.push({ children: entry.entries({ signal: opts.signal })[Symbol.asyncIterator](), prefix: path });
      } else if (isFileEntry(entry)) yield { entry, path };
      else throw invalid(`${path}: a ${entry.type} cannot be exported`);
    }
  } finally {
    // Left early (an error, or the reader stopped): the listings still open are closed, as a for-await over each would.
    for (const { children } of stack.reverse()) await children.return?.();
  }
}
