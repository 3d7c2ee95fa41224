import { execFile, spawn } from 'node:child_process';
import { chmodSync, existsSync, mkdirSync, readdirSync, statSync, symlinkSync, utimesSync, writeFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { CLI } from './helpers.js';

/*
 * The `dms` command runs its program (dist/lib/dms.cjs) through V8's code cache
 * (runtime/code-cache.ts). Each load is a process of its own: a process runs a bundle once.
 */
const LOADER = fileURLToPath(new URL('../../dist/lib/code-cache.js', import.meta.url));
const run = promisify(execFile);

let dir: string;
let bundle: string;
let cache: string;
beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'dms-code-cache-'));
  bundle = join(dir, 'prog.cjs');
  cache = join(dir, 'cache');
  // Enough functions that V8 has something to cache; what the program answers is checked each time.
  const fns = Array.from({ length: 200 }, (_, i) => `function f${i}(x) { return x + ${i}; }`).join('\n');
  writeFileSync(bundle, `(function (exports, require, module, __filename, __dirname) { 'use strict';\n${fns}\nexports.answer = () => f2(40);\n})`);
});
afterEach(() => rm(dir, { recursive: true, force: true }));

interface Loaded {
  answer: number;
  use: Array<{ use: string; role?: string }>;
}

/** Loads the bundle in a new process, then saves its cache as `role` (if given). */
async function load(role?: 'node' | 'command', env: Record<string, string> = { DMS_CODE_CACHE: cache }): Promise<Loaded> {
  const script = `
    const { loadBundle, saveCodeCache, codeCacheUse } = await import(${JSON.stringify(LOADER)});
    const answer = loadBundle(${JSON.stringify(bundle)}).answer();
    ${role ? `saveCodeCache(${JSON.stringify(role)});` : ''}
    console.log(JSON.stringify({ answer, use: codeCacheUse() }));`;
  const { stdout } = await run(process.execPath, ['--input-type=module', '-e', script], { env: { ...process.env, ...env }, timeout: 10_000 });
  return JSON.parse(stdout) as Loaded;
}

const files = () => (existsSync(cache) ? readdirSync(cache).sort() : []);
const cacheFile = (role: string) => join(cache, files().find((f) => f.endsWith(`.${role}.v8`))!);

describe('the code cache', () => {
  it('is written where there was none, then used; a node’s is preferred; the folder and files are the user’s alone', async () => {
    expect(await load('command')).toEqual({ answer: 42, use: [{ file: bundle, use: 'none' }] });
    expect(files()).toEqual([expect.stringMatching(/^prog-[0-9a-f]{16}-[0-9a-f]{16}\.command\.v8$/)]);
    expect(statSync(cache).mode & 0o777).toBe(0o700);
    expect(statSync(cacheFile('command')).mode & 0o777).toBe(0o600);
    const written = statSync(cacheFile('command')).mtimeMs;

    expect(await load('command')).toEqual({ answer: 42, use: [{ file: bundle, use: 'accepted', role: 'command' }] });
    expect(statSync(cacheFile('command')).mtimeMs).toBe(written);

    // A started node writes its own even though a command's was used, and a load takes it first.
    await load('node');
    expect(files().map((f) => f.split('.')[1])).toEqual(['command', 'node']);
    expect(await load('node')).toEqual({ answer: 42, use: [{ file: bundle, use: 'accepted', role: 'node' }] });
  });

  it('a damaged cache is refused by V8, the program runs the same, and the cache is written again', async () => {
    await load('node');
    // Shorter and longer than the program's source, and empty: the two share one buffer.
    for (const junk of [Buffer.alloc(4096, 7), Buffer.alloc(1 << 20, 7), Buffer.alloc(0)]) {
      writeFileSync(cacheFile('node'), junk, { mode: 0o600 });
      expect(await load('node')).toEqual({ answer: 42, use: [{ file: bundle, use: 'rejected' }] });
      expect(await load()).toEqual({ answer: 42, use: [{ file: bundle, use: 'accepted', role: 'node' }] });
    }
  });

  it('is never read from a folder or file another user could have written, nor through a link', async () => {
    await load('node');
    chmodSync(cache, 0o777);
    expect(await load('node')).toMatchObject({ answer: 42, use: [{ use: 'untrusted' }] });
    chmodSync(cache, 0o700);

    chmodSync(cacheFile('node'), 0o666);
    expect(await load()).toMatchObject({ answer: 42, use: [{ use: 'none' }] });
    chmodSync(cacheFile('node'), 0o600);

    // The folder itself a link (to a folder that would otherwise do): not trusted.
    const real = join(dir, 'elsewhere');
    mkdirSync(real, { mode: 0o700 });
    const link = join(dir, 'linked');
    symlinkSync(real, link);
    expect(await load('node', { DMS_CODE_CACHE: link })).toMatchObject({ answer: 42, use: [{ use: 'untrusted' }] });
    expect(readdirSync(real)).toEqual([]);
  });

  it('DMS_CODE_CACHE=off neither reads nor writes one', async () => {
    expect(await load('node', { DMS_CODE_CACHE: 'off' })).toEqual({ answer: 42, use: [{ file: bundle, use: 'off' }] });
    expect(existsSync(cache)).toBe(false);
  });

  it('a new build of the bundle gets a cache of its own, and the old build’s is removed', async () => {
    await load('node');
    const before = files();
    utimesSync(bundle, new Date(), new Date(Date.now() + 5_000));
    expect(await load('node')).toMatchObject({ use: [{ use: 'none' }] });
    const after = files();
    expect(after).toHaveLength(1);
    expect(after).not.toEqual(before);
  });

  it('a node started by `dms start` writes the cache, and the next start runs from it, plugins and all', async () => {
    const home = join(dir, 'home');
    mkdirSync(home);
    // A plugin is an ES module the program imports by URL: from a cached script too (the start
    // fails, naming the plugin, if it cannot be loaded).
    const greeter = fileURLToPath(new URL('../../examples/plugins/greeter/index.mjs', import.meta.url));
    writeFileSync(join(home, 'dms_config.json'), JSON.stringify({ plugins: { modules: [greeter] }, network: { enabled: false } }));
    const started = async (): Promise<string> => {
      const node = spawn(process.execPath, [CLI, '--home', home, 'start', '--port', '0', '--log-level', 'debug', '--log-format', 'json'], {
        env: { ...process.env, DMS_CODE_CACHE: cache },
        stdio: ['ignore', 'ignore', 'pipe'],
      });
      let log = '';
      node.stderr.on('data', (d: Buffer) => (log += d.toString()));
      const line = await new Promise<string>((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error(`no code cache line within 15 s:\n${log}`)), 15_000);
        node.stderr.on('data', () => {
          const found = log.split('\n').find((l) => l.includes('"codeCache"'));
          if (found) {
            clearTimeout(timer);
            resolve(found);
          }
        });
      });
      // The node writes its cache 2 s after it answers; wait for the file, then stop it.
      const deadline = Date.now() + 10_000;
      while (!files().some((f) => f.endsWith('.node.v8')) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100));
      node.kill('SIGTERM');
      await new Promise((r) => node.once('exit', r));
      return line;
    };
    expect(JSON.parse(await started()).codeCache).toEqual([{ file: expect.stringMatching(/dist\/lib\/dms\.cjs$/), use: 'none' }]);
    expect(files()).toContainEqual(expect.stringMatching(/^dms-.*\.node\.v8$/));
    expect(JSON.parse(await started()).codeCache).toEqual([{ file: expect.stringMatching(/dist\/lib\/dms\.cjs$/), use: 'accepted', role: 'node' }]);
  }, 60_000);
});
