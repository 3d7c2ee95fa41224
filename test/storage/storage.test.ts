import { existsSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { MikroORM } from '@mikro-orm/sqlite';
import sqlite3 from 'sqlite3';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { JobSpecInput } from '../../behaviors/jobs/schema.js';
import { DmsError } from '../../runtime/errors.js';
import { storageConfig } from '../../storage/config.js';
import { openStorage, type Storage } from '../../storage/index.js';

const spec: JobSpecInput = {
  name: 'hello',
  image: 'dms-test/busybox:latest',
  command: ['echo', 'hi'],
  environment: { GREETING: 'hi' },
  resources: { cpu: { cores: 0.5 }, memory: { size: 64 * 1024 * 1024 } },
};

let dir: string;
let path: string;
let storage: Storage;

beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'dms-storage-'));
  path = join(dir, 'nested', 'dms.db');
  storage = await openStorage(path);
});

afterEach(async () => {
  await storage.close();
  await rm(dir, { recursive: true, force: true });
});

async function rejection(p: Promise<unknown>): Promise<DmsError> {
  const e = await p.then(
    () => expect.fail('expected a rejection'),
    (e: unknown) => e,
  );
  expect(e).toBeInstanceOf(DmsError);
  return e as DmsError;
}

describe('jobs', () => {
  it('creates a pending job with defaults applied and reads it back after reopening', async () => {
    const job = await storage.jobs.create(spec);
    expect(job).toMatchObject({
      name: 'hello',
      command: ['echo', 'hi'],
      environment: { GREETING: 'hi' },
      resources: { cpu: { cores: 0.5 }, memory: { size: 64 * 1024 * 1024 }, storage: { size: 0 } },
      executor: 'docker',
      status: 'pending',
      node: null,
      exit_code: null,
      error: null,
      timeout_s: null,
      container_id: null,
    });
    expect(job.id).toMatch(/^[0-9a-f-]{36}$/);
    expect(job.created_at).toBe(job.updated_at);

    await storage.close();
    storage = await openStorage(path);
    expect(await storage.jobs.get(job.id)).toEqual(job);
    expect(await storage.events.listFor(job.id)).toMatchObject([{ from_status: null, to_status: 'pending', reason: 'submitted' }]);
  });

  it('reads a job the same by id (plain SELECT) as in a list (the ORM), with every field set', async () => {
    const requester = '12D3KooWGzxzKZYveHXtpG6AsrUJBcWxHBFS2HsEoGTxrMLvKXtf';
    const job = await storage.jobs.create(
      { ...spec, timeout_s: 30, placement: { labels: { gpu: 'a100' }, location: { region: 'eu' }, max_attempts: 2 } },
      { requester, pending_reason: 'no node has 64 MiB memory free' },
    );
    const attempts = [{ node: requester, started_at: new Date(0).toISOString(), ended_at: null, outcome: null, reason: null }];
    await storage.jobs.update(job.id, { status: 'running', reason: 'started', node: requester, container_id: 'c1', attempts });
    const ended = await storage.jobs.update(job.id, { status: 'failed', reason: 'exit 3', exit_code: 3, error: 'exit 3' });
    expect(ended).toMatchObject({ placement: { labels: { gpu: 'a100' }, max_attempts: 2 }, requester, node: requester, exit_code: 3, timeout_s: 30, attempts });

    await storage.close();
    storage = await openStorage(path);
    const [listed] = await storage.jobs.list({ status: 'failed' });
    expect(listed).toEqual(ended);
    expect(await storage.jobs.get(job.id)).toEqual(listed);
    expect(await storage.jobs.get('0b6f8f3e-6c55-4b43-9d0a-000000000000')).toBeNull();
  });

  it('reads by id as a value, never as SQL: quotes, wildcards and a changed case find nothing', async () => {
    const job = await storage.jobs.create(spec);
    for (const id of [`x' or '1'='1`, `${job.id}' --`, '1) or (1=1', '%', '*', `${job.id.slice(0, 8)}%`, job.id.toUpperCase()]) {
      expect(await storage.jobs.get(id), id).toBeNull();
    }
    expect((await storage.jobs.get(job.id))?.id).toBe(job.id);
  });

  it('keeps a given id and refuses a spec with a bad field, naming it', async () => {
    const id = '0b6f8f3e-6c55-4b43-9d0a-6f7e2d4b7a10';
    expect((await storage.jobs.create(spec, { id, node: 'peer-1' })).id).toBe(id);
    const e = await rejection(storage.jobs.create({ ...spec, resources: { cpu: { cores: -1 }, memory: { size: 1 } } }));
    expect(e.kind).toBe('invalid');
    expect(e.message).toContain('resources.cpu.cores');
    expect((await rejection(storage.jobs.create(spec, { id: '../etc' }))).kind).toBe('invalid');
  });

  it('replaces the ended run of a job its requester places here again, keeping its events; never another node\'s record, nor a run not ended', async () => {
    const id = '3f1d2c4b-5a69-4e7f-8a1b-2c3d4e5f6a7b';
    const placed = { id, requester: 'peer-r', again: true };
    await storage.jobs.create(spec, placed);
    await storage.jobs.update(id, { status: 'running', reason: 'started', container_id: 'c1' });
    // Not ended: whoever asks, the id stays the run's.
    const live = await rejection(storage.jobs.create(spec, placed));
    expect(live.message).toBe(`job ${id} has a run here that has not ended (running)`);
    expect(live.kind).toBe('unavailable');
    await storage.jobs.update(id, { status: 'failed', reason: 'the node restarted', exit_code: 137 });

    expect((await rejection(storage.jobs.create(spec, { id, requester: 'peer-r' }))).message).toBe(`job ${id} already exists`);
    expect((await rejection(storage.jobs.create(spec, { ...placed, requester: 'peer-x' }))).message).toBe(`job ${id} exists here, placed by another node`);
    expect(await storage.jobs.get(id)).toMatchObject({ status: 'failed', exit_code: 137, container_id: 'c1' });

    const again = await storage.jobs.create({ ...spec, command: ['echo', 'again'] }, placed);
    expect(again).toMatchObject({ id, status: 'pending', command: ['echo', 'again'], requester: 'peer-r', exit_code: null, error: null, container_id: null });
    expect(await storage.jobs.get(id)).toEqual(again);
    expect(await storage.jobs.count({})).toBe(1);
    const events = await storage.events.listFor(id);
    expect(events.map((e) => [e.from_status, e.to_status])).toEqual([
      [null, 'pending'],
      ['pending', 'running'],
      ['running', 'failed'],
      ['failed', 'pending'],
    ]);
    expect(events[3].reason).toBe('placed here again by its requester (the run here before failed)');
    // The new run moves on as any job does.
    expect(await storage.jobs.update(id, { status: 'running', reason: 'started' })).toMatchObject({ status: 'running' });
  });

  it('records every change as an event in the same transaction', async () => {
    const job = await storage.jobs.create(spec, { pending_reason: 'waiting for bids' });
    expect(job.pending_reason).toBe('waiting for bids');
    const running = await storage.jobs.update(job.id, { status: 'running', reason: 'started', container_id: 'c1', node: 'peer-1' });
    expect(running).toMatchObject({ status: 'running', container_id: 'c1', node: 'peer-1', pending_reason: null });
    const done = await storage.jobs.update(job.id, { status: 'completed', reason: 'exited 0', exit_code: 0 });
    expect(done).toMatchObject({ status: 'completed', exit_code: 0, error: null });
    expect(Date.parse(done.updated_at)).toBeGreaterThanOrEqual(Date.parse(job.updated_at));

    const events = await storage.events.listFor(job.id);
    expect(events.map((e) => [e.from_status, e.to_status, e.reason])).toEqual([
      [null, 'pending', 'submitted'],
      ['pending', 'running', 'started'],
      ['running', 'completed', 'exited 0'],
    ]);
  });

  it('refuses transitions the job model forbids and leaves the job and its history untouched', async () => {
    const job = await storage.jobs.create(spec);
    expect((await rejection(storage.jobs.update(job.id, { status: 'completed', reason: 'skipped running' }))).kind).toBe('conflict');
    await storage.jobs.update(job.id, { status: 'failed', reason: 'cancelled by user' });
    const e = await rejection(storage.jobs.update(job.id, { status: 'running', reason: 'late start' }));
    expect(e.kind).toBe('conflict');
    expect(e.message).toContain('failed');
    expect(await storage.jobs.get(job.id)).toMatchObject({ status: 'failed', error: 'cancelled by user' });
    expect(await storage.events.listFor(job.id)).toHaveLength(2);
    expect((await rejection(storage.jobs.update('00000000-0000-4000-8000-000000000000', { reason: 'x' }))).kind).toBe('not_found');
  });

  it('keeps an explicit error over the reason and notes changes that keep the status', async () => {
    const job = await storage.jobs.create(spec);
    await storage.jobs.update(job.id, { reason: 'no node has 64 GiB', pending_reason: 'no node has 64 GiB' });
    expect((await storage.jobs.get(job.id))?.pending_reason).toBe('no node has 64 GiB');
    await storage.jobs.update(job.id, { status: 'running', reason: 'started' });
    const failed = await storage.jobs.update(job.id, { status: 'failed', reason: 'exited', exit_code: 3, error: 'exited with code 3' });
    expect(failed).toMatchObject({ exit_code: 3, error: 'exited with code 3' });
    expect((await storage.events.listFor(job.id)).map((e) => e.to_status)).toEqual(['pending', 'pending', 'running', 'failed']);
  });

  it('lists by status in submission order with paging, and counts', async () => {
    const ids: string[] = [];
    for (let i = 0; i < 5; i++) ids.push((await storage.jobs.create({ ...spec, name: `job-${i}` })).id);
    await storage.jobs.update(ids[1], { status: 'running', reason: 'r' });
    await storage.jobs.update(ids[3], { status: 'running', reason: 'r' });
    await storage.jobs.update(ids[4], { status: 'failed', reason: 'f' });

    expect((await storage.jobs.list()).map((j) => j.name)).toEqual(['job-0', 'job-1', 'job-2', 'job-3', 'job-4']);
    expect((await storage.jobs.list({ status: 'running' })).map((j) => j.id)).toEqual([ids[1], ids[3]]);
    expect((await storage.jobs.list({ status: ['pending', 'failed'] })).map((j) => j.id)).toEqual([ids[0], ids[2], ids[4]]);
    expect((await storage.jobs.list({ limit: 2, offset: 2 })).map((j) => j.name)).toEqual(['job-2', 'job-3']);
    expect(await storage.jobs.count()).toBe(5);
    expect(await storage.jobs.count({ status: 'running' })).toBe(2);
    expect(await storage.jobs.count({ executor: 'null' })).toBe(0);
    expect(await storage.jobs.get('00000000-0000-4000-8000-000000000000')).toBeNull();
  });

  it('lists the jobs of one batch, which share their created_at, in the order they were submitted', async () => {
    const names = Array.from({ length: 12 }, (_, i) => `batch-${i}`);
    const results = await storage.jobs.commitAll(names.map((name) => ({ op: 'create' as const, spec: { ...spec, name } })));
    expect(new Set(results.map((r) => (r.ok ? r.job.created_at : null))).size).toBe(1);
    expect((await storage.jobs.list()).map((j) => j.name)).toEqual(names);
    expect((await storage.jobs.list({ order: 'desc' })).map((j) => j.name)).toEqual([...names].reverse());
  });

  it('serialises concurrent writers: of two racing final transitions exactly one wins', async () => {
    const jobs = await Promise.all(Array.from({ length: 20 }, (_, i) => storage.jobs.create({ ...spec, name: `c-${i}` })));
    await Promise.all(jobs.map((j) => storage.jobs.update(j.id, { status: 'running', reason: 'started' })));
    const race = await Promise.allSettled(
      jobs.flatMap((j) => [
        storage.jobs.update(j.id, { status: 'completed', reason: 'exited', exit_code: 0 }),
        storage.jobs.update(j.id, { status: 'failed', reason: 'cancelled by user' }),
      ]),
    );
    expect(race.filter((r) => r.status === 'fulfilled')).toHaveLength(20);
    for (const r of race) if (r.status === 'rejected') expect((r.reason as DmsError).kind).toBe('conflict');
    for (const j of jobs) expect(await storage.events.listFor(j.id)).toHaveLength(3);
    expect(await storage.jobs.count({ status: 'running' })).toBe(0);
  });

  it('stores values that would be SQL to a careless writer exactly as given (the commit writes them into its statements)', async () => {
    const hostile = "it's'); drop table job; --";
    const environment = { QUOTES: `'"\``, BACKSLASH: 'C:\\temp\\x', MARKS: '? ?1 :a @b $c', SEMI: 'a;b', LINES: 'one\ntwo\r\n', WIDE: 'ü ✓ 𝄞' };
    const job = await storage.jobs.create({ ...spec, name: hostile, environment });
    const [changed] = await storage.jobs.commitAll([{ op: 'update', id: job.id, change: { status: 'running', reason: hostile, container_id: hostile } }]);
    expect(changed.ok).toBe(true);
    await storage.close();
    storage = await openStorage(path);
    const read = await storage.jobs.get(job.id);
    expect(read).toMatchObject({ name: hostile, environment, status: 'running', container_id: hostile });
    expect((await storage.jobs.list({}))[0]).toEqual(read);
    expect((await storage.events.listFor(job.id)).map((e) => e.reason)).toEqual(['submitted', hostile]);
  });

  it('stores text with a NUL in it whole, and the rest of its batch with it', async () => {
    // SQLite reads the SQL it is given as a C string: a NUL left in a literal would end the statement.
    const nul = 'before\0after';
    const [named, other] = await storage.jobs.commitAll([
      { op: 'create', spec: { ...spec, name: nul } },
      { op: 'create', spec },
    ]);
    if (!named.ok || !other.ok) return expect.fail('a write of the batch was refused');
    const [failed] = await storage.jobs.commitAll([{ op: 'update', id: named.job.id, change: { status: 'failed', reason: nul, error: nul } }]);
    expect(failed.ok).toBe(true);
    await storage.device.put({ name: nul });
    const ensemble = '5d0a1f7e-3b0e-4c55-9a43-1f4f2f6b2c10';
    await storage.ensembles.create(ensemble, { name: 'pair', parts: {} } as never);
    await storage.ensembles.update(ensemble, { status: 'failed', reason: nul });
    await storage.close();
    storage = await openStorage(path);
    expect(await storage.jobs.get(named.job.id)).toMatchObject({ name: nul, status: 'failed', error: nul });
    expect(await storage.jobs.get(other.job.id)).toMatchObject({ status: 'pending' });
    expect((await storage.events.listFor(named.job.id)).map((e) => e.reason)).toEqual(['submitted', nul]);
    expect((await storage.device.get())?.name).toBe(nul);
    expect((await storage.ensembles.get(ensemble))?.reason).toBe(nul);
  });

  it('lists more jobs than one slice in a bound of bytes, in order, and ends a page past the bound', async () => {
    // A page is read 32 rows at a time: the second read failed (the ORM takes a raw() order once),
    // and every list of more than 32 jobs answered 500 (found by CI: the crash test's listing).
    const made = (await storage.jobs.commitAll(Array.from({ length: 70 }, (_, i) => ({ op: 'create' as const, spec: { ...spec, name: `j${i}` } })))).map((r) => (r.ok ? r.job.id : ''));
    const all = await storage.jobs.list({ limit: 1000, order: 'asc', maxBytes: 64 * 1024 * 1024 });
    expect(all.map((j) => j.id)).toEqual(made);
    const page = await storage.jobs.list({ limit: 1000, offset: 5, order: 'desc', maxBytes: 64 * 1024 * 1024 });
    expect(page.map((j) => j.id)).toEqual([...made].reverse().slice(5));
    const bounded = await storage.jobs.list({ limit: 1000, order: 'asc', maxBytes: 10 * JSON.stringify(all[0]).length });
    expect(bounded.map((j) => j.id)).toEqual(made.slice(0, 10));
  });

  it('looks up a key holding a NUL as any other: not found, never a broken statement', async () => {
    // Found on a running node: GET /api/v1/jobs/%00 answered 500, the ORM having written the
    // id into its SQL as a literal, which SQLite ended at the NUL.
    const job = await storage.jobs.create({ ...spec, name: 'a\0b' });
    expect(await storage.jobs.get('a\0b')).toBeNull();
    expect(await storage.jobs.get(`${job.id}\0`)).toBeNull();
    expect(await storage.events.listFor('\0')).toEqual([]);
    expect(await storage.ensembles.get('\0')).toBeNull();
    expect(await storage.jobs.get(job.id)).toMatchObject({ name: 'a\0b' });
  });

  it('stores none of a batch the database fails, and commits the next one', async () => {
    const kept = await storage.jobs.create(spec);
    // The database itself refuses one statement of the batch (a trigger, as a full disk or a
    // corrupt page would): the writes before it in the batch must not stay either.
    const other = new sqlite3.Database(path);
    await new Promise<void>((resolve, reject) =>
      other.exec("create trigger refuse_boom before insert on job_event when new.reason = 'boom' begin select raise(abort, 'refused by the test'); end;", (e) => (e ? reject(e) : resolve())),
    );
    await new Promise<void>((resolve) => other.close(() => resolve()));
    const batch = storage.jobs.commitAll([
      { op: 'create', spec: { ...spec, name: 'lost' } },
      { op: 'update', id: kept.id, change: { status: 'running', reason: 'boom' } },
    ]);
    await expect(batch).rejects.toThrow(/refused by the test/);
    expect((await storage.jobs.list({})).map((j) => j.name)).toEqual(['hello']);
    expect(await storage.jobs.get(kept.id)).toMatchObject({ status: 'pending' });
    expect(await storage.events.listFor(kept.id)).toHaveLength(1);
    // No transaction was left open: the next batch commits.
    expect(await storage.jobs.update(kept.id, { status: 'running', reason: 'started' })).toMatchObject({ status: 'running' });
  });

  it('writes through a WAL journal', async () => {
    await storage.jobs.create(spec);
    expect(existsSync(`${path}-wal`)).toBe(true);
  });
});

describe('allocations', () => {
  it('creates, lists and releases; a second release keeps the first time', async () => {
    const job = await storage.jobs.create(spec);
    const a = await storage.allocations.create({ resources: { cpu: { cores: 1 }, memory: { size: 64 * 1024 * 1024 } }, job_id: job.id });
    const b = await storage.allocations.create({ resources: { cpu: { cores: 2 }, memory: { size: 128 * 1024 * 1024 }, storage: { size: 10 } } });
    expect(a).toMatchObject({ job_id: job.id, released_at: null, resources: { storage: { size: 0 } } });
    expect(b.job_id).toBeNull();
    expect((await storage.allocations.list({ active: true })).map((x) => x.id)).toEqual([a.id, b.id]);

    const released = await storage.allocations.release(b.id);
    expect(released.released_at).not.toBeNull();
    expect((await storage.allocations.release(b.id)).released_at).toBe(released.released_at);
    expect((await storage.allocations.list({ active: false })).map((x) => x.id)).toEqual([b.id]);

    expect((await storage.allocations.releaseForJob(job.id)).map((x) => x.id)).toEqual([a.id]);
    expect(await storage.allocations.releaseForJob(job.id)).toEqual([]);
    expect(await storage.allocations.list({ active: true })).toEqual([]);
    expect(await storage.allocations.list({ job_id: job.id })).toHaveLength(1);
    expect((await storage.allocations.get(a.id))?.released_at).not.toBeNull();
    expect((await rejection(storage.allocations.release('00000000-0000-4000-8000-000000000000'))).kind).toBe('not_found');
    expect((await rejection(storage.allocations.create({ resources: { cpu: { cores: 1 } } } as never))).kind).toBe('invalid');
  });
});

describe('device settings', () => {
  it('starts empty, merges updates and persists them', async () => {
    expect(await storage.device.get()).toBeNull();
    expect(await storage.device.put({ name: 'edge-1' })).toEqual({ name: 'edge-1', location: {}, labels: {}, onboarded: null });
    const onboarded = { cpu: { cores: 2 }, memory: { size: 4 * 1024 ** 3 }, storage: { size: 10 ** 10 } };
    await storage.device.put({ location: { region: 'eu', country: 'DE', city: 'Berlin' }, labels: { zone: 'lab' }, onboarded });
    await storage.close();
    storage = await openStorage(path);
    expect(await storage.device.get()).toEqual({ name: 'edge-1', location: { region: 'eu', country: 'DE', city: 'Berlin' }, labels: { zone: 'lab' }, onboarded });
    expect((await rejection(storage.device.put({ labels: { 'bad label': 'x' } }))).kind).toBe('invalid');
    expect((await rejection(storage.device.put({ location: { planet: 'mars' } } as never))).kind).toBe('invalid');
  });
});

describe('waiting cancels', () => {
  const cancel = (job_id: string, node: string, since: number) => ({ job_id, node, reason: `gave up ${job_id}`, since });
  const listed = async () => (await storage.cancels.list()).map((c) => [c.job_id, c.node, c.since, c.placed_again]);

  it('keeps them across a reopen, one per job, the newest within the bound, oldest first', async () => {
    await storage.cancels.put(cancel('j2', 'p', 2_000), 10);
    await storage.cancels.put(cancel('j1', 'p', 1_000), 10);
    // Asked again: the newer one replaces the job's earlier one.
    await storage.cancels.put(cancel('j1', 'q', 3_000), 10);
    await storage.close();
    storage = await openStorage(path);
    expect(await listed()).toEqual([['j2', 'p', 2_000, false], ['j1', 'q', 3_000, false]]);
    expect((await storage.cancels.list())[0].reason).toBe('gave up j2');

    await storage.cancels.put(cancel('j3', 'p', 4_000), 2);
    expect(await listed()).toEqual([['j1', 'q', 3_000, false], ['j3', 'p', 4_000, false]]);
  });

  it('removes only the cancel named by its time when one is given, a newer one of the job stays', async () => {
    await storage.cancels.put(cancel('j1', 'p', 1_000), 10);
    await storage.cancels.put(cancel('j1', 'p', 2_000), 10);
    await storage.cancels.remove('j1', 1_000);
    expect(await listed()).toEqual([['j1', 'p', 2_000, false]]);
    await storage.cancels.remove('j1');
    expect(await listed()).toEqual([]);
  });

  it('says which job is unfinished on the same node again: its run there is not one to cancel', async () => {
    const again = await storage.jobs.create(spec);
    await storage.jobs.update(again.id, { status: 'running', reason: 'started', node: 'p' });
    const elsewhere = await storage.jobs.create(spec);
    await storage.jobs.update(elsewhere.id, { status: 'running', reason: 'started', node: 'q' });
    const ended = await storage.jobs.create(spec);
    await storage.jobs.update(ended.id, { status: 'running', reason: 'started', node: 'p' });
    await storage.jobs.update(ended.id, { status: 'failed', reason: 'cancelled' });
    for (const [i, id] of [again.id, elsewhere.id, ended.id, 'unknown-here'].entries()) await storage.cancels.put(cancel(id, 'p', i), 10);
    expect(await listed()).toEqual([[again.id, 'p', 0, true], [elsewhere.id, 'p', 1, false], [ended.id, 'p', 2, false], ['unknown-here', 'p', 3, false]]);
  });
});

describe('schema', () => {
  it('the migrations build exactly the schema the entities describe', async () => {
    const orm = await MikroORM.init(storageConfig(path));
    try {
      expect(await orm.getMigrator().getPendingMigrations()).toEqual([]);
      expect((await orm.schema.getUpdateSchemaSQL({ wrap: false })).trim()).toBe('');
    } finally {
      await orm.close(true);
    }
  });
});
