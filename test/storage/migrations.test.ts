import { randomUUID } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { MikroORM } from '@mikro-orm/sqlite';
import { afterEach, beforeEach, expect, it } from 'vitest';
import { storageConfig } from '../../storage/config.js';
import { openStorage } from '../../storage/index.js';
import { MIGRATIONS } from '../../storage/migrations/index.js';

let dir: string;
beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'dms-migrate-'));
});
afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

async function withOrm<T>(path: string, fn: (orm: MikroORM) => Promise<T>): Promise<T> {
  const orm = await MikroORM.init(storageConfig(path));
  try {
    return await fn(orm);
  } finally {
    await orm.close(true);
  }
}

it('upgrades a database made by the first release in place, keeping its rows', async () => {
  const path = join(dir, 'old.db');
  // The database as a node that shipped only the first migration left it.
  const old = await MikroORM.init(storageConfig(path, MIGRATIONS.slice(0, 1)));
  await old.getMigrator().up();
  // Rows as that release wrote them: the columns of its schema only.
  const job = { id: randomUUID() };
  const conn = old.em.getConnection();
  const now = Date.now();
  await conn.execute(
    'insert into `job` (`id`, `name`, `image`, `command`, `environment`, `resources`, `executor`, `status`, `created_at`, `updated_at`) values (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)',
    [job.id, 'old', 'img', '[]', '{}', JSON.stringify({ cpu: { cores: 1 }, memory: { size: 1 }, storage: { size: 0 } }), 'docker', 'running', now, now],
  );
  for (const [from, to, reason] of [[null, 'pending', 'submitted'], ['pending', 'running', 'started']]) {
    await conn.execute('insert into `job_event` (`job_id`, `at`, `from_status`, `to_status`, `reason`) values (?, ?, ?, ?, ?)', [job.id, now, from, to, reason]);
  }
  // The entities already expect the later indexes, so the diff check sees what is missing.
  expect(await old.schema.getUpdateSchemaSQL({ wrap: false })).toContain('job_status_created_at_index');
  await old.close(true);

  const storage = await openStorage(path);
  try {
    // The later columns read as an old job means: no placement, no requester, no attempts.
    expect(await storage.jobs.get(job.id)).toMatchObject({ name: 'old', status: 'running', placement: null, requester: null, attempts: [] });
    expect((await storage.events.listFor(job.id)).map((e) => e.to_status)).toEqual(['pending', 'running']);
    expect(await storage.jobs.list({ status: 'running' })).toHaveLength(1);
    // An older home waits for no cancel; the table its requester keeps them in is there.
    expect(await storage.cancels.list()).toEqual([]);
    await storage.cancels.put({ job_id: job.id, node: 'provider', reason: 'cancelled', since: now }, 10);
    expect(await storage.cancels.list()).toEqual([{ job_id: job.id, node: 'provider', reason: 'cancelled', since: now, placed_again: false }]);
  } finally {
    await storage.close();
  }

  await withOrm(path, async (orm) => {
    const conn = orm.em.getConnection();
    const applied = await conn.execute<{ name: string }[]>('select name from mikro_orm_migrations order by id');
    expect(applied.map((r) => r.name)).toEqual(MIGRATIONS.map((m) => m.name));
    const indexes = await conn.execute<{ name: string }[]>("select name from sqlite_master where type = 'index' and name like '%_index'");
    expect(indexes.map((r) => r.name).sort()).toEqual(['allocation_job_id_index', 'ensemble_created_at_index', 'job_ensemble_index', 'job_event_job_id_index', 'job_status_created_at_index']);
    expect((await orm.schema.getUpdateSchemaSQL({ wrap: false })).trim()).toBe('');
  });
});

it('opens an up-to-date database without applying anything again', async () => {
  const path = join(dir, 'current.db');
  await (await openStorage(path)).close();
  await (await openStorage(path)).close();
  await withOrm(path, async (orm) => {
    const applied = await orm.em.getConnection().execute<{ name: string }[]>('select name from mikro_orm_migrations');
    expect(applied).toHaveLength(MIGRATIONS.length);
  });
});
