import type { MigrationObject } from '@mikro-orm/core';
import { Migrator } from '@mikro-orm/migrations';
import type { Options } from '@mikro-orm/sqlite';
import { ENTITIES } from './entities.js';
import { MIGRATIONS } from './migrations/index.js';

/** The one connection knex's sqlite3 dialect opens; only `exec` is used here. */
interface SqliteHandle {
  exec(sql: string, cb: (err: Error | null) => void): void;
}

/**
 * WAL lets readers run while a write commits, and synchronous=FULL makes a commit durable
 * once it returns, so a job the caller was told about survives a crash of the process and
 * of the machine. busy_timeout covers another process (e.g. the CLI) holding the lock briefly.
 */
const PRAGMAS = 'PRAGMA journal_mode = WAL; PRAGMA synchronous = FULL; PRAGMA busy_timeout = 5000;';

/**
 * ORM options for the SQLite file at `path`. `migrations` is a parameter only so a test can
 * build a database as an older release would have; the node always uses the full list.
 */
export function storageConfig(path: string, migrations: MigrationObject[] = MIGRATIONS): Options {
  return {
    dbName: path,
    entities: ENTITIES,
    extensions: [Migrator],
    migrations: {
      migrationsList: migrations,
      transactional: true,
      allOrNothing: true,
      // Snapshots are for generating migrations from entity diffs; ours are written by hand.
      snapshot: false,
      silent: true,
    },
    pool: {
      afterCreate: (conn: SqliteHandle, done: (err: Error | null, conn: SqliteHandle) => void) =>
        conn.exec(PRAGMAS, (err) => done(err, conn)),
    },
    debug: false,
  };
}
