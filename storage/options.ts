import type { Options } from '@mikro-orm/sqlite';
import { ENTITIES } from './entities.js';

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
 * ORM options for the SQLite file at `path`, without the migrator: a node whose database is
 * up to date never loads it (@mikro-orm/migrations, umzug and their CLI libraries are a tenth
 * of start-up). ./config.ts adds it for a database that needs migrating.
 */
export function baseOptions(path: string): Options {
  return {
    dbName: path,
    entities: ENTITIES,
    pool: {
      afterCreate: (conn: SqliteHandle, done: (err: Error | null, conn: SqliteHandle) => void) =>
        conn.exec(PRAGMAS, (err) => done(err, conn)),
    },
    debug: false,
  };
}
