/**
 * The node's writes, as SQL of its own on the database's one connection; the ORM reads, and
 * migrates.
 *
 * Why not the ORM's unit of work: MikroORM runs every flush, and every `transactional`, inside
 * an AsyncLocalStorage, and on Node 20 the first `AsyncLocalStorage.run` of a process turns on
 * V8's promise hooks for every promise it makes afterwards, for good. One flush (onboarding
 * writes the device settings) left a node paying them on every await, its machines and schemas
 * slower alike: an onboarded node spent 958–994 µs of CPU per null job, 860–875 µs with these
 * writes (bench/RESULTS.md, bench:vitals, nineteenth session). `test/storage/promise-hooks.test.ts`
 * holds every write to that.
 *
 * Why one `exec` per transaction: each call into node-sqlite3 is a trip through libuv's pool
 * and back to the event loop, which on a busy node waits behind whatever else the loop runs.
 */
import type { MikroORM } from '@mikro-orm/sqlite';

/** The node-sqlite3 database knex's pool lends: its one connection, so holding it holds the database for this process. */
interface SqliteDatabase {
  all(sql: string, cb: (err: Error | null, rows: Record<string, unknown>[]) => void): void;
  exec(sql: string, cb: (err: Error | null) => void): void;
}

/** What a writer says to SQLite, each a single call into it. */
export interface SqlConnection {
  all(sql: string, params: readonly unknown[]): Promise<Record<string, unknown>[]>;
  /** `sql` with `params` written in as literals. */
  format(sql: string, params: readonly unknown[]): string;
  /** Runs `statements` as one transaction: stored together, or none of them. */
  commit(statements: readonly string[]): Promise<void>;
}

/**
 * Lends `fn` the database's connection. Parameters are written into the SQL as the ORM's own
 * `execute` writes them (the platform's formatQuery). Holding the pool's one connection keeps
 * every other query of this process out until `fn` is over: what `fn` read is still so when
 * it commits.
 */
export async function withConnection<T>(orm: MikroORM, fn: (conn: SqlConnection) => Promise<T>): Promise<T> {
  const connection = orm.em.getConnection();
  const platform = orm.em.getPlatform();
  await connection.ensureConnection();
  const client = connection.getKnex().client;
  const db = (await client.acquireConnection()) as SqliteDatabase;
  const format = (sql: string, params: readonly unknown[]) => platform.formatQuery(sql, params.map(literal));
  try {
    return await fn({
      format,
      all: (sql, params) => new Promise((resolve, reject) => db.all(format(sql, params), (err, rows) => (err ? reject(err) : resolve(rows)))),
      commit: (statements) =>
        new Promise((resolve, reject) =>
          db.exec(`BEGIN IMMEDIATE;\n${statements.join(';\n')};\nCOMMIT;`, (err) => {
            if (!err) return resolve();
            // exec stops at the failing statement, its transaction still open: none of it may stay.
            db.exec('ROLLBACK', () => reject(err));
          }),
        ),
    });
  } finally {
    await client.releaseConnection(db);
  }
}

/**
 * A string as SQL text. SQLite reads the SQL `exec` is given as a C string, so a NUL inside a
 * quoted literal ended the statement there: a job named "a\0b", or a provider's error message
 * with a NUL in it, failed its whole group commit, every other write of it with it. Such a
 * string is written as its UTF-8 bytes cast to text, which stores and reads back whole.
 */
class TextBytes {
  constructor(private readonly text: string) {}

  toSqlString(): string {
    return textBytesSql(this.text);
  }
}

/** `text` as SQL that holds a NUL whole: its UTF-8 bytes cast to text. */
export const textBytesSql = (text: string): string => `CAST(X'${Buffer.from(text, 'utf8').toString('hex')}' AS TEXT)`;

const literal = (value: unknown): unknown => (typeof value === 'string' && value.includes('\0') ? new TextBytes(value) : value);

/** A nullable text column's value. */
export const textColumn = (v: unknown): string | null => (v === null || v === undefined ? null : String(v));

/** A JSON column's value (stored as text). */
export const jsonColumn = <T>(v: unknown): T => (typeof v === 'string' ? (JSON.parse(v) as T) : (v as T));

/** A datetime column's value: epoch milliseconds, as the ORM stores them (older rows: text). */
export const dateColumn = (v: unknown): Date => (typeof v === 'number' || /^\d+$/.test(String(v)) ? new Date(Number(v)) : new Date(String(v)));
