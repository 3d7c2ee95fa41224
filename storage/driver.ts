/**
 * SQLite's driver (node-sqlite3) needs its native binding, which this package builds when it is
 * installed (scripts/sqlite-binding.mjs; npm runs no install script of the driver's own). Without
 * one, knex answers with fifty lines ending in "run npm install sqlite3", which does not build
 * it: the node says instead, in one line, what does.
 */
import { createRequire } from 'node:module';
import { DmsError, errorText } from '../runtime/errors.js';
import { packageDir } from '../runtime/version.js';

const loadDriver = (): unknown => createRequire(import.meta.url)('sqlite3');

/** Throws an `unavailable` DmsError naming the way out when the driver (or `load`, in tests) cannot load. */
export function checkSqliteDriver(load: () => unknown = loadDriver): void {
  try {
    load();
  } catch (e) {
    const why = errorText(e).split('\n')[0].replace(/[.:]\s*(Tried)?:?$/, '');
    const dir = packageDir();
    const fix = `build it with \`node scripts/sqlite-binding.mjs\`${dir ? ` in ${dir}` : ' in the dms package'} (npm install does)`;
    throw new DmsError('unavailable', `SQLite's driver (node-sqlite3) cannot load its native binding: ${why}; ${fix}`, { cause: e });
  }
}
