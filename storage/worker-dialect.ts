/**
 * The SQLite connection, run in a worker thread. libsql's driver comes prebuilt for the platform
 * (nothing compiles at install, where node-sqlite3 compiled for two minutes), but its calls are
 * synchronous: on the node's own thread every commit's fsync stopped the whole node, network
 * included, and five nodes on one machine placed half the jobs a second they placed on
 * node-sqlite3 (bench/RESULTS.md, bench:placement). Here the node sends each statement to the
 * worker and awaits the answer, as node-sqlite3 runs its statements on libuv's pool.
 *
 * A knex client for MikroORM's libsql driver (`driverOptions.client`): the dialect's SQL, table
 * and column compilers and result handling stay MikroORM's; only where a statement runs changes.
 */
import { createRequire } from 'node:module';
import { Worker } from 'node:worker_threads';
import { LibSqlKnexDialect } from '@mikro-orm/knex';

/** What the worker runs: one libsql Database, one statement per message, answered in order. */
const WORKER_SOURCE = `
const { parentPort, workerData } = require('node:worker_threads');
const Database = require(workerData.driver);
let db;
try {
  db = new Database(workerData.filename);
  parentPort.postMessage({ ready: true });
} catch (e) {
  parentPort.postMessage({ ready: false, error: { message: e.message, code: e.code } });
}
const plain = (v) => (typeof v === 'bigint' ? Number(v) : v);
parentPort.on('message', ({ id, op, sql, bindings }) => {
  try {
    if (op === 'exec') {
      db.exec(sql);
      return parentPort.postMessage({ id });
    }
    if (op === 'close') {
      db.close();
      return parentPort.postMessage({ id });
    }
    const statement = db.prepare(sql);
    if (op === 'run') {
      const r = statement.run(bindings);
      return parentPort.postMessage({ id, result: { changes: plain(r.changes), lastInsertRowid: plain(r.lastInsertRowid) } });
    }
    parentPort.postMessage({ id, result: op === 'get' ? statement.get(bindings) : statement.all(bindings) });
  } catch (e) {
    parentPort.postMessage({ id, error: { message: e.message, code: e.code, rawCode: e.rawCode } });
  }
});
`;

type Op = 'exec' | 'run' | 'all' | 'get' | 'close';
interface Answer {
  id?: number;
  ready?: boolean;
  result?: unknown;
  error?: { message: string; code?: string; rawCode?: number };
}

/** An error as libsql's SqliteError carries it: MikroORM's exception converter reads its message and code. */
function sqliteError(e: NonNullable<Answer['error']>): Error {
  return Object.assign(new Error(e.message), { name: 'SqliteError', code: e.code, rawCode: e.rawCode });
}

/** One database file's connection, in its own thread. */
export class WorkerConnection {
  private readonly worker: Worker;
  private readonly waiting = new Map<number, { resolve(v: unknown): void; reject(e: Error): void }>();
  private nextId = 0;
  private failed: Error | null = null;
  /** Whether the database is in memory: knex's pool keeps such a connection for good. */
  readonly memory: boolean;

  private constructor(filename: string) {
    this.memory = filename === ':memory:';
    const driver = createRequire(import.meta.url).resolve('libsql');
    // CommonJS, whatever flags the node runs with (`--input-type=module` would make it an ES module).
    this.worker = new Worker(WORKER_SOURCE, { eval: true, execArgv: [], workerData: { filename, driver } });
    this.worker.on('message', (m: Answer) => {
      if (m.id === undefined) return;
      const w = this.waiting.get(m.id);
      if (!w) return;
      this.waiting.delete(m.id);
      if (m.error) w.reject(sqliteError(m.error));
      else w.resolve(m.result);
    });
    // A thread that dies takes its statements with it: each caller hears why.
    const fail = (e: Error) => {
      this.failed ??= e;
      for (const w of this.waiting.values()) w.reject(e);
      this.waiting.clear();
    };
    this.worker.on('error', fail);
    this.worker.on('exit', (code) => fail(new Error(`the SQLite worker exited (code ${code})`)));
  }

  static open(filename: string): Promise<WorkerConnection> {
    const conn = new WorkerConnection(filename);
    return new Promise((resolve, reject) => {
      conn.worker.once('message', (m: Answer) => (m.ready ? resolve(conn) : reject(sqliteError(m.error ?? { message: 'the SQLite worker did not open the database' }))));
      conn.worker.once('error', reject);
    });
  }

  private send(op: Op, sql: string, bindings: unknown[] = []): Promise<unknown> {
    if (this.failed) return Promise.reject(this.failed);
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      this.waiting.set(id, { resolve, reject });
      this.worker.postMessage({ id, op, sql, bindings });
    });
  }

  /** False once its thread has died or been closed: the pool then opens another. */
  get alive(): boolean {
    return this.failed === null;
  }

  exec(sql: string): Promise<unknown> {
    return this.send('exec', sql);
  }

  query(method: 'run' | 'all' | 'get', sql: string, bindings: unknown[]): Promise<unknown> {
    return this.send(method, sql, bindings);
  }

  async close(): Promise<void> {
    if (!this.failed) await this.send('close', '').catch(() => undefined);
    this.failed ??= new Error('the SQLite connection is closed');
    await this.worker.terminate();
  }
}

/** The knex client MikroORM's libsql driver is given: its dialect, with statements run by a WorkerConnection. */
export class WorkerLibSqlDialect extends LibSqlKnexDialect {
  // The driver is the worker's: the node's own thread never loads libsql.
  override _driver(): null {
    return null;
  }

  override async acquireRawConnection(): Promise<WorkerConnection> {
    return WorkerConnection.open((this as unknown as { connectionSettings: { filename: string } }).connectionSettings.filename);
  }

  async destroyRawConnection(connection: WorkerConnection): Promise<void> {
    await connection.close();
  }

  // The libsql dialect renews a file's connection every 10 s (a rule for remote databases);
  // a local file's connection stays good as long as its thread lives, and the pool opens a new
  // one in place of a thread that died.
  override validateConnection(connection: WorkerConnection): boolean {
    return connection.alive;
  }

  override async _query(connection: WorkerConnection, obj: { sql?: string; bindings?: unknown[]; response?: unknown; context?: unknown; method?: string }) {
    if (!obj.sql) throw new Error('The query is empty');
    if (!connection) throw new Error('No connection provided');
    const dialect = this as unknown as { getCallMethod(o: unknown): 'run' | 'all' | 'get'; _formatBindings(b: unknown[] | undefined): unknown[] };
    const response = (await connection.query(dialect.getCallMethod(obj), obj.sql, dialect._formatBindings(obj.bindings))) as { changes?: number; lastInsertRowid?: number };
    obj.response = response;
    obj.context = { lastID: response?.lastInsertRowid, changes: response?.changes };
    return obj;
  }
}
