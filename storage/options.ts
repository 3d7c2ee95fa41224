import type { Options } from '@mikro-orm/libsql';
import { ENTITIES } from './entities.js';
import { type WorkerConnection, WorkerLibSqlDialect } from './worker-dialect.js';

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
      afterCreate: (conn: WorkerConnection, done: (err: Error | null, conn: WorkerConnection) => void) =>
        conn.exec(PRAGMAS).then(() => done(null, conn), (e: Error) => done(e, conn)),
    },
    // Statements run in a worker thread (./worker-dialect.ts says why).
    driverOptions: { client: WorkerLibSqlDialect },
    debug: false,
  };
}
