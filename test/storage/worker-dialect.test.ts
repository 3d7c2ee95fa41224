// The SQLite connection in its worker thread, through the ORM as the node opens it: statements
// answer in order, SQLite's errors keep their kind, and a thread that dies is replaced.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { UniqueConstraintViolationException } from '@mikro-orm/core';
import { MikroORM } from '@mikro-orm/libsql';
import { afterEach, expect, it } from 'vitest';
import { baseOptions } from '../../storage/options.js';
import type { WorkerConnection } from '../../storage/worker-dialect.js';

let dir: string | undefined;
let orm: MikroORM | undefined;
afterEach(async () => {
  await orm?.close(true);
  if (dir) rmSync(dir, { recursive: true, force: true });
});

async function open() {
  dir = mkdtempSync(join(tmpdir(), 'dms-worker-'));
  orm = await MikroORM.init(baseOptions(join(dir, 'db.sqlite')));
  const conn = orm.em.getConnection();
  await conn.execute('create table t (id integer primary key, v text)');
  return conn;
}

it('runs statements in the worker, in order, with their results and the pragmas set', async () => {
  const conn = await open();
  const writes = Array.from({ length: 50 }, (_, i) => conn.execute('insert into t (id, v) values (?, ?)', [i, `v${i}`], 'run'));
  const results = await Promise.all(writes);
  expect(results.at(-1)).toMatchObject({ affectedRows: 1 });
  expect(await conn.execute('select count(*) as n from t')).toEqual([{ n: 50 }]);
  expect(await conn.execute('pragma journal_mode')).toEqual([{ journal_mode: 'wal' }]);
  expect(await conn.execute('pragma synchronous')).toEqual([{ synchronous: 2 }]);
});

it("keeps SQLite's errors with their message and code, which the ORM turns into its exceptions", async () => {
  const conn = await open();
  await conn.execute('insert into t (id, v) values (1, ?)', ['a'], 'run');
  const err = (await conn.execute('insert into t (id, v) values (1, ?)', ['b'], 'run').catch((e: unknown) => e)) as Error & { code?: string };
  expect(err.message).toContain('UNIQUE constraint failed: t.id');
  expect(err.code).toBe('SQLITE_CONSTRAINT_PRIMARYKEY');
  expect(orm!.em.getDriver().convertException(err)).toBeInstanceOf(UniqueConstraintViolationException);
  await expect(conn.execute('select * from no_such_table')).rejects.toThrow('no such table: no_such_table');
});

it('opens a new thread in place of one that died, and the database is all there', async () => {
  const conn = await open();
  await conn.execute('insert into t (id, v) values (1, ?)', ['kept'], 'run');
  const client = conn.getKnex().client as { acquireConnection(): Promise<WorkerConnection>; releaseConnection(c: WorkerConnection): Promise<void> };
  const worker = await client.acquireConnection();
  await client.releaseConnection(worker);
  await worker.close();
  expect(worker.alive).toBe(false);
  expect(await conn.execute('select v from t')).toEqual([{ v: 'kept' }]);
});
