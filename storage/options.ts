import { AbstractSqlDriver, type Configuration, type Options, SqliteConnection, SqlitePlatform } from '@mikro-orm/sqlite';
import { textBytesSql } from './connection.js';
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
 * The ORM writes the values of its queries into their SQL as literals, and SQLite reads that SQL
 * as a C string: a NUL in a looked-up key ended the statement there (GET /api/v1/jobs/%00
 * answered 500). Such a string is written as its bytes cast to text, as ./connection.ts writes.
 */
class NulSafePlatform extends SqlitePlatform {
  override escape(value: unknown): string {
    if (typeof value === 'string' && value.includes('\0')) return textBytesSql(value);
    // A list (`in (...)`) is escaped element by element, each of which may hold one.
    if (Array.isArray(value) && value.some((v) => Array.isArray(v) || (typeof v === 'string' && v.includes('\0')))) {
      return value.map((v) => (Array.isArray(v) ? `(${this.escape(v)})` : this.escape(v))).join(', ');
    }
    return super.escape(value);
  }
}

/** MikroORM's SQLite driver on NulSafePlatform. */
class SqliteDriver extends AbstractSqlDriver<SqliteConnection> {
  constructor(config: Configuration) {
    super(config, new NulSafePlatform(), SqliteConnection, ['knex', 'sqlite3']);
  }
}

/**
 * ORM options for the SQLite file at `path`, without the migrator: a node whose database is
 * up to date never loads it (@mikro-orm/migrations, umzug and their CLI libraries are a tenth
 * of start-up). ./config.ts adds it for a database that needs migrating.
 */
export function baseOptions(path: string): Options {
  return {
    dbName: path,
    driver: SqliteDriver,
    entities: ENTITIES,
    pool: {
      afterCreate: (conn: SqliteHandle, done: (err: Error | null, conn: SqliteHandle) => void) =>
        conn.exec(PRAGMAS, (err) => done(err, conn)),
    },
    debug: false,
  };
}
