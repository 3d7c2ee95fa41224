import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { checkSqliteDriver } from '../../storage/driver.js';
import { packageDir } from '../../runtime/version.js';

// What the install script would build, without building it (--dry-run): the choice between
// the machine's SQLite and the bundled one is what decides a 7-s or a 75-s install.
const SCRIPT = fileURLToPath(new URL('../../scripts/sqlite-binding.mjs', import.meta.url));
const dirs: string[] = [];

/** A prefix whose include/sqlite3.h says `version` (SQLITE_VERSION_NUMBER), or has no header. */
function prefixWith(versionNumber: number | null): string {
  const dir = mkdtempSync(join(tmpdir(), 'dms-sqlite-prefix-'));
  dirs.push(dir);
  if (versionNumber !== null) {
    mkdirSync(join(dir, 'include'));
    writeFileSync(join(dir, 'include', 'sqlite3.h'), `#define SQLITE_VERSION "x"\n#define SQLITE_VERSION_NUMBER ${versionNumber}\n`);
  }
  return dir;
}

function dryRun(env: Record<string, string>) {
  const { DMS_SQLITE: _a, DMS_SQLITE_PREFIX: _b, ...rest } = process.env;
  const run = spawnSync(process.execPath, [SCRIPT, '--dry-run'], { env: { ...rest, ...env }, encoding: 'utf8' });
  return { status: run.status, said: run.stderr.trim() };
}

afterAll(() => dirs.forEach((d) => rmSync(d, { recursive: true, force: true })));

describe('scripts/sqlite-binding.mjs', () => {
  it("builds against the machine's SQLite when its headers are there and new enough", () => {
    const prefix = prefixWith(3_044_002);
    expect(dryRun({ DMS_SQLITE_PREFIX: prefix })).toEqual({ status: 0, said: `[sqlite-binding] would build against the machine's SQLite 3.44.2 (${prefix})` });
  });

  it('builds the bundled SQLite, saying why, when the headers are missing or too old', () => {
    const none = prefixWith(null);
    expect(dryRun({ DMS_SQLITE_PREFIX: none }).said).toBe(`[sqlite-binding] would build the bundled SQLite: no ${join(none, 'include', 'sqlite3.h')} (Debian: apt-get install libsqlite3-dev)`);
    const old = prefixWith(3_031_001);
    expect(dryRun({ DMS_SQLITE_PREFIX: old }).said).toBe(`[sqlite-binding] would build the bundled SQLite: ${join(old, 'include', 'sqlite3.h')} is SQLite 3.31.1, older than 3.40.0, the oldest this node is tested with`);
  });

  it('is told which with DMS_SQLITE, and refuses a choice it cannot make', () => {
    const prefix = prefixWith(3_044_002);
    expect(dryRun({ DMS_SQLITE_PREFIX: prefix, DMS_SQLITE: 'bundled' }).said).toBe('[sqlite-binding] would build the bundled SQLite: DMS_SQLITE=bundled');
    const system = dryRun({ DMS_SQLITE_PREFIX: prefixWith(null), DMS_SQLITE: 'system' });
    expect(system.status).toBe(1);
    expect(system.said).toMatch(/DMS_SQLITE=system, but no .*sqlite3\.h/);
    expect(dryRun({ DMS_SQLITE: 'fast' })).toEqual({ status: 1, said: "[sqlite-binding] DMS_SQLITE must be auto, system or bundled, not 'fast'" });
  });
});

describe('checkSqliteDriver', () => {
  it('says in one line that the binding is missing and how to build it, where knex would print fifty', () => {
    const missing = () => {
      throw new Error('Could not locate the bindings file. Tried:\n → /x/node_modules/sqlite3/build/Release/node_sqlite3.node\n → …');
    };
    expect(() => checkSqliteDriver(missing)).toThrow(
      `SQLite's driver (node-sqlite3) cannot load its native binding: Could not locate the bindings file; build it with \`node scripts/sqlite-binding.mjs\` in ${packageDir()} (npm install does)`,
    );
    const noLibrary = () => {
      throw new Error('libsqlite3.so.0: cannot open shared object file: No such file or directory');
    };
    expect(() => checkSqliteDriver(noLibrary)).toThrow(/cannot load its native binding: libsqlite3\.so\.0: cannot open shared object file: No such file or directory; build it/);
  });

  it('loads the installed driver', () => {
    expect(() => checkSqliteDriver()).not.toThrow();
  });
});
