/**
 * Loads the bundled program (dist/lib/dms.cjs, scripts/bundle.mjs) with a V8 code cache: the
 * bytecode V8 compiled the last time, so a start compiles almost nothing. Node 20 has no compile
 * cache for ES modules (Node 22's `module.enableCompileCache`), and compiling the node's 6 MB of
 * JavaScript was about 0.35–0.45 s of every start (issue 25); a script run through `vm.Script`
 * can be given `cachedData`, so the program is one CommonJS script wrapped in a function.
 *
 * The cache is bytecode this process will run, so it is read only from a folder that only this
 * user can write (owned by them, no group or world write, not a symbolic link); anywhere else the
 * program is compiled from its source as if there were no cache. V8 itself refuses a cache made
 * by another V8, other flags or another source, and a refused cache is written again.
 *
 * Where: `DMS_CODE_CACHE` (a folder, or `off`), else `$XDG_CACHE_HOME/dms`, else `~/.cache/dms`.
 * Two caches per build: the one a started node writes (it holds the daemon's start-up code too)
 * and the one a command writes when there is none; a load prefers the node's.
 */
import { createHash } from 'node:crypto';
import { closeSync, constants, fstatSync, lstatSync, openSync, readdirSync, readSync, renameSync, statSync, unlinkSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { homedir } from 'node:os';
import { basename, dirname, join } from 'node:path';
import { cachedDataVersionTag } from 'node:v8';
import { Script } from 'node:vm';
import { makeDirs } from './files.js';
import { distrustReason } from './ownership.js';
import { holdYoungGeneration, withStartFlags } from './young-generation.js';

/** Who made a cache: a started node (its start-up code included) or another command. */
export type CacheRole = 'node' | 'command';

/**
 * What became of the cache when a bundle was loaded: V8 took it, refused it, there was none,
 * caching is off (DMS_CODE_CACHE=off), or the folder is not one only this user can write.
 */
export type CacheUse = 'accepted' | 'rejected' | 'none' | 'off' | 'untrusted';

interface Loaded {
  file: string;
  exports: unknown;
  script: Script;
  use: CacheUse;
  /** The role of the cache that was accepted, if one was. */
  role?: CacheRole;
  /** Where this build's caches go; undefined when caching is off or the folder is not trusted. */
  dir?: string;
  stem: string;
  written: Set<CacheRole>;
}

/**
 * One registry per process, whichever copy of this module asks (the `dms` entry point, the plugin
 * API's module and the bundle each carry one): a bundle is run once, and all of them get its exports.
 */
const REGISTRY = Symbol.for('dms.code-cache');
const registry = ((globalThis as Record<symbol, unknown>)[REGISTRY] ??= new Map<string, Loaded>()) as Map<string, Loaded>;

/**
 * `import(specifier)` for the program's own loading of ES modules by name (plugins). A script run
 * by `vm` cannot import in Node 20 (its import callback is experimental, and V8 drops it from a
 * script made from a code cache), so the loader, an ES module, lends its `import`.
 */
const IMPORT = Symbol.for('dms.import');
export function importModule(specifier: string): Promise<unknown> {
  const lent = (globalThis as Record<symbol, unknown>)[IMPORT] as ((s: string) => Promise<unknown>) | undefined;
  return lent ? lent(specifier) : import(specifier);
}

/** The folder caches go in, or undefined when caching is off. */
export function cacheDir(env: NodeJS.ProcessEnv = process.env): string | undefined {
  const chosen = env.DMS_CODE_CACHE;
  if (chosen === 'off' || chosen === '0') return undefined;
  if (chosen) return chosen;
  return join(env.XDG_CACHE_HOME || join(homedir(), '.cache'), 'dms');
}

/** Made if missing; trusted only if it is a real folder of this user that nobody else can write. */
function trustedDir(dir: string): boolean {
  try {
    makeDirs(dir, 0o700);
    const st = lstatSync(dir);
    return st.isDirectory() && distrustReason(st) === undefined;
  } catch {
    return false;
  }
}

/** An open file and its size. */
interface Opened {
  fd: number;
  size: number;
}

/**
 * The cache file at `path`, opened, if it is a file (not a link) of this user that nobody else
 * can write: checked and then read through one descriptor, as runtime/config-file.ts reads a
 * working directory's file.
 */
function openTrusted(path: string): Opened | undefined {
  let fd: number;
  try {
    fd = openSync(path, constants.O_RDONLY | constants.O_NOFOLLOW);
  } catch {
    return undefined;
  }
  try {
    const st = fstatSync(fd);
    if (st.isFile() && distrustReason(st) === undefined) return { fd, size: st.size };
  } catch {
    // unreadable: no cache
  }
  closeSync(fd);
  return undefined;
}

/** The first `file.size` bytes of `file` read into `into` (fewer if it shrank meanwhile). */
function readInto(file: Opened, into: Buffer): Buffer {
  let at = 0;
  while (at < file.size) {
    const n = readSync(file.fd, into, at, file.size - at, at);
    if (n === 0) break;
    at += n;
  }
  return into.subarray(0, at);
}

const digest = (...parts: unknown[]) => createHash('sha256').update(JSON.stringify(parts)).digest('hex').slice(0, 16);

/**
 * `<bundle name>-<install>-<build>`: the install is the bundle's path (two checkouts share the
 * folder), the build its size and time and V8's tag for what its caches depend on (its version,
 * its flags, the CPU's features: V8 refuses a cache made under another, so each keeps its own).
 */
function stemOf(file: string): string {
  const st = statSync(file);
  const build = digest(st.size, st.mtimeMs, cachedDataVersionTag());
  return `${basename(file, '.cjs')}-${digest(file)}-${build}`;
}

const cachePath = (dir: string, stem: string, role: CacheRole) => join(dir, `${stem}.${role}.v8`);

/**
 * Compiles the bundle, from its cache when there is one V8 takes. The cache's bytes (6 MB, in
 * the buffer the source was read into) are referenced only from this frame: once it returns
 * they are garbage, and the first scavenge of the bundle's own start-up frees them. Held by the
 * caller's frame while the bundle ran, they outlived the young generation that start-up keeps
 * small (runtime/young-generation.ts), and an idle node carried them until its first full
 * collection.
 */
function compile(file: string, dir: string | undefined, trusted: boolean, stem: string): { script: Script; use: CacheUse; role?: CacheRole } {
  let cache: Opened | undefined;
  let role: CacheRole | undefined;
  if (trusted && dir !== undefined) {
    for (const r of ['node', 'command'] as const) {
      cache = openTrusted(cachePath(dir, stem, r));
      if (cache) {
        role = r;
        break;
      }
    }
  }
  try {
    const opened = openSync(file, 'r');
    let source: string;
    let bytes: Buffer;
    try {
      const program = { fd: opened, size: fstatSync(opened).size };
      // One buffer holds the source's bytes, then the cache's: a page touched for the first time
      // costs a fault (~12 µs on this project's machine), and a buffer each was ~1,400 more
      // faults a start (bench/RESULTS.md, bench:vitals).
      bytes = Buffer.allocUnsafeSlow(Math.max(program.size, cache?.size ?? 0));
      // As latin1 (the bundle is ASCII): Node copies it into a large latin1 string outside V8's
      // heap rather than decoding 6 MB of UTF-8 into it, and the buffer can take the cache's bytes.
      source = readInto(program, bytes).toString('latin1');
    } finally {
      closeSync(opened);
    }
    const cached = cache ? readInto(cache, bytes) : undefined;
    const script = new Script(source, { filename: file, cachedData: cached });
    const use: CacheUse = dir === undefined ? 'off' : !trusted ? 'untrusted' : !cached ? 'none' : script.cachedDataRejected ? 'rejected' : 'accepted';
    return { script, use, role };
  } finally {
    if (cache) closeSync(cache.fd);
  }
}

/**
 * Runs the bundle at `file` (a CommonJS module written as one function expression of
 * `(exports, require, module, __filename, __dirname)`) once per process and returns its exports.
 */
export function loadBundle(file: string): unknown {
  const known = registry.get(file);
  if (known) return known.exports;
  (globalThis as Record<symbol, unknown>)[IMPORT] ??= (specifier: string) => import(specifier);
  const dir = cacheDir();
  const trusted = dir !== undefined && trustedDir(dir);
  // Before the stem, which holds V8's flag hash: caches are made and read under the same flags.
  holdYoungGeneration();
  const stem = stemOf(file);
  const { script, use, role } = compile(file, dir, trusted, stem);
  const module = { exports: {} as unknown, filename: file, id: file, loaded: false };
  const loaded: Loaded = {
    file,
    // What it has exported so far, to whatever asks for it while it runs (CommonJS's cycles).
    exports: module.exports,
    script,
    use,
    role: use === 'accepted' ? role : undefined,
    dir: trusted ? dir : undefined,
    stem,
    written: new Set(),
  };
  registry.set(file, loaded);
  try {
    const wrapper = script.runInThisContext() as (e: unknown, r: NodeJS.Require, m: typeof module, f: string, d: string) => void;
    wrapper.call(module.exports, module.exports, createRequire(file), module, file, dirname(file));
  } catch (e) {
    registry.delete(file);
    throw e;
  }
  module.loaded = true;
  loaded.exports = module.exports;
  return module.exports;
}

/** How each bundle of this process was loaded: the start-up log says it. */
export function codeCacheUse(): Array<{ file: string; use: CacheUse; role?: CacheRole }> {
  return [...registry.values()].map(({ file, use, role }) => ({ file, use, role }));
}

/**
 * Writes each loaded bundle's cache as `role` where it is worth it: a node writes its cache when
 * it did not start from a node's cache (the bytecode of everything it has run by now); a command
 * writes one only when there was none to use. Never throws: without a cache the program runs the same.
 */
export function saveCodeCache(role: CacheRole): void {
  for (const l of registry.values()) {
    if (!l.dir || l.written.has(role)) continue;
    // A command writes only where nothing was (a node's cache may be written by now).
    if (role === 'node' ? l.role === 'node' : l.use === 'accepted' || l.written.size > 0) continue;
    l.written.add(role);
    try {
      const target = cachePath(l.dir, l.stem, role);
      const temp = `${target}.${process.pid}.tmp`;
      // Made under the flags every load compiles under: V8 refuses a cache made under others.
      writeFileSync(temp, withStartFlags(() => l.script.createCachedData()), { mode: 0o600, flag: 'wx' });
      renameSync(temp, target);
      removeOtherBuilds(l.dir, l.stem);
    } catch {
      // a cache is only ever a head start
    }
  }
}

/** Caches of this install's earlier builds are never read again. */
function removeOtherBuilds(dir: string, stem: string): void {
  const install = stem.slice(0, stem.lastIndexOf('-') + 1);
  for (const name of readdirSync(dir)) {
    if (name.startsWith(install) && !name.startsWith(`${stem}.`) && name.endsWith('.v8')) {
      try {
        unlinkSync(join(dir, name));
      } catch {
        // another process removed it first
      }
    }
  }
}
