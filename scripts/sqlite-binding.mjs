#!/usr/bin/env node
/**
 * Builds node-sqlite3's binding at install time (package.json `postinstall`; npm runs no install
 * script of sqlite3's own, see `allowScripts`). Prebuilt binaries cannot be downloaded here, so
 * it always compiles, and what it compiles decides how long `npm install` takes:
 *
 *  - against the machine's SQLite when its headers and library are there (Debian's
 *    `libsqlite3-dev`, SQLite ≥ MIN_VERSION): only the binding's own C++, about 7 s;
 *  - otherwise against the SQLite amalgamation node-sqlite3 ships: about 75 s on two cores.
 *
 * `DMS_SQLITE=bundled` or `DMS_SQLITE=system` picks one (system fails when there is none);
 * `DMS_SQLITE_PREFIX` names another prefix than /usr (its include/ and lib/); `--dry-run` says
 * what would be built and builds nothing (test/unit/sqlite-binding.test.ts). A build against the
 * machine's SQLite that fails falls back to the bundled one, so an install never ends without a
 * binding. The binding is rebuilt only when missing or built for another choice.
 */
import { spawnSync } from 'node:child_process';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';

/** The oldest SQLite the node is tested against (Debian 12's), as SQLITE_VERSION_NUMBER; older ones build bundled. */
const MIN_VERSION = 3_040_000;
const versionText = (n) => `${Math.floor(n / 1_000_000)}.${Math.floor(n / 1000) % 1000}.${n % 1000}`;

const require = createRequire(import.meta.url);
const say = (line) => process.stderr.write(`[sqlite-binding] ${line}\n`);

/** Where the driver's package is installed, or null when it is not. */
function sqlite3Dir() {
  try {
    return dirname(require.resolve('sqlite3/package.json'));
  } catch {
    return null;
  }
}

/** The machine's SQLite under `prefix`, with its version, or why it cannot be used. */
function systemSqlite(prefix) {
  const header = join(prefix, 'include', 'sqlite3.h');
  if (!existsSync(header)) return { why: `no ${header} (Debian: apt-get install libsqlite3-dev)` };
  const m = /#define\s+SQLITE_VERSION_NUMBER\s+(\d+)/.exec(readFileSync(header, 'utf8'));
  const number = m ? Number(m[1]) : 0;
  const version = versionText(number);
  if (number < MIN_VERSION) return { why: `${header} is SQLite ${version}, older than ${versionText(MIN_VERSION)}, the oldest this node is tested with` };
  return { version };
}

function nodeGyp() {
  // npm names its own node-gyp to every lifecycle script; run by hand, it is beside npm.
  if (process.env.npm_config_node_gyp) return process.env.npm_config_node_gyp;
  const npmCli = process.env.npm_execpath;
  const besideNpm = npmCli ? join(dirname(npmCli), '..', 'node_modules', 'node-gyp', 'bin', 'node-gyp.js') : null;
  return besideNpm && existsSync(besideNpm) ? besideNpm : require.resolve('node-gyp/bin/node-gyp.js');
}

/** Node's own headers, where npm says (`nodedir`) or beside this node: node-gyp would download them, and cannot here. */
function nodeDir() {
  if (process.env.npm_config_nodedir) return [];
  const prefix = join(dirname(process.execPath), '..');
  return existsSync(join(prefix, 'include', 'node', 'node.h')) ? [`--nodedir=${prefix}`] : [];
}

function build(dir, sqlitePrefix) {
  // Both cores: the binding is four C++ files (the bundled amalgamation is one, and gains nothing).
  const args = [nodeGyp(), 'rebuild', '--jobs=max', ...nodeDir(), ...(sqlitePrefix ? [`--sqlite=${sqlitePrefix}`] : [])];
  const began = Date.now();
  const run = spawnSync(process.execPath, args, { cwd: dir, stdio: ['ignore', 'ignore', 'pipe'], encoding: 'utf8' });
  const seconds = ((Date.now() - began) / 1000).toFixed(1);
  if (run.status === 0) return { ok: true, seconds };
  return { ok: false, seconds, tail: (run.stderr ?? '').trim().split('\n').slice(-15).join('\n') };
}

const dir = sqlite3Dir();
if (!dir) {
  say('sqlite3 is not installed here: nothing to build');
  process.exit(0);
}

const want = process.env.DMS_SQLITE ?? 'auto';
if (!['auto', 'system', 'bundled'].includes(want)) {
  say(`DMS_SQLITE must be auto, system or bundled, not '${want}'`);
  process.exit(1);
}
const prefix = process.env.DMS_SQLITE_PREFIX || '/usr';
const system = want === 'bundled' ? { why: 'DMS_SQLITE=bundled' } : systemSqlite(prefix);
if (want === 'system' && !system.version) {
  say(`DMS_SQLITE=system, but ${system.why}`);
  process.exit(1);
}

if (process.argv.includes('--dry-run')) {
  say(system.version ? `would build against the machine's SQLite ${system.version} (${prefix})` : `would build the bundled SQLite: ${system.why}`);
  process.exit(0);
}

const binding = join(dir, 'build', 'Release', 'node_sqlite3.node');
const marker = join(dir, 'build', 'dms-sqlite.json');
const choice = system.version ? { sqlite: 'system', prefix, version: system.version } : { sqlite: 'bundled' };
const built = existsSync(marker) ? readFileSync(marker, 'utf8') : null;
if (existsSync(binding) && built === JSON.stringify(choice)) {
  say(`binding already built against ${choice.sqlite === 'system' ? `the machine's SQLite ${choice.version}` : 'the bundled SQLite'}`);
  process.exit(0);
}

let result;
if (system.version) {
  result = build(dir, prefix);
  if (result.ok) say(`built against the machine's SQLite ${system.version} (${prefix}) in ${result.seconds} s`);
  else {
    say(`building against the machine's SQLite ${system.version} failed after ${result.seconds} s; building the bundled SQLite instead:\n${result.tail}`);
    choice.sqlite = 'bundled';
    delete choice.prefix;
    delete choice.version;
  }
} else {
  say(`building the bundled SQLite (about a minute and a quarter on two cores): ${system.why}`);
}
if (choice.sqlite === 'bundled') {
  result = build(dir, null);
  if (!result.ok) {
    say(`building node-sqlite3 failed after ${result.seconds} s (it needs python3, make and a C++ compiler):\n${result.tail}`);
    process.exit(1);
  }
  say(`built against the bundled SQLite in ${result.seconds} s`);
}
writeFileSync(marker, JSON.stringify(choice));
