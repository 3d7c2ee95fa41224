import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { JobJournal } from '../../actors/orchestrator/journal.js';
import type { JobSpecInput } from '../../behaviors/jobs/schema.js';
import { DmsError } from '../../runtime/errors.js';
import { openStorage, type Storage } from '../../storage/index.js';

const spec: JobSpecInput = { name: 'j', image: 'none', executor: 'null', resources: { cpu: { cores: 0.1 }, memory: { size: 64 * 1024 * 1024 } } };

let dir: string;
let path: string;
let storage: Storage;
beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'dms-journal-'));
  path = join(dir, 'dms.sqlite');
  storage = await openStorage(path);
});
afterEach(async () => {
  await storage.close().catch(() => undefined);
  await rm(dir, { recursive: true, force: true });
});

describe('group commit (JobRepository.commitAll)', () => {
  it('applies writes in order, later ones seeing earlier ones, and refuses only the bad ones', async () => {
    const [created] = await storage.jobs.commitAll([{ op: 'create', spec: { ...spec, command: ['echo', 'ü'], environment: { A: '1' }, timeout_s: 5 } }]);
    if (!created.ok) return expect.fail(created.error.message);
    const id = created.job.id;
    // What the batch wrote reads back through the ORM exactly as the batch reported it.
    expect(await storage.jobs.get(id)).toEqual(created.job);
    const results = await storage.jobs.commitAll([
      { op: 'update', id, change: { status: 'running', reason: 'started', container_id: 'c-1' } },
      { op: 'create', spec: { ...spec, name: '' } },
      { op: 'update', id: '00000000-0000-4000-8000-000000000000', change: { status: 'failed', reason: 'x' } },
      { op: 'update', id, change: { status: 'completed', reason: 'exited with code 0', exit_code: 0 } },
      { op: 'update', id, change: { status: 'pending', reason: 'back' } },
      { op: 'create', spec, opts: { id } },
    ]);
    expect(results.map((r) => (r.ok ? r.job.status : `${r.error.kind}: ${r.error.message}`))).toEqual([
      'running',
      'invalid: invalid job spec: name: must not be empty',
      'not_found: job 00000000-0000-4000-8000-000000000000 not found',
      'completed',
      `conflict: job ${id} has already completed`,
      `conflict: job ${id} already exists`,
    ]);
    expect(await storage.jobs.get(id)).toEqual((results[3] as { job: unknown }).job);
    expect(await storage.jobs.get(id)).toMatchObject({ status: 'completed', exit_code: 0, container_id: 'c-1', command: ['echo', 'ü'], timeout_s: 5 });
    expect((await storage.events.listFor(id)).map((e) => `${e.from_status}→${e.to_status}: ${e.reason}`)).toEqual([
      'null→pending: submitted',
      'pending→running: started',
      'running→completed: exited with code 0',
    ]);
  });
  it('refuses a new job under an id stored by an earlier run, keeping the rest of its batch', async () => {
    const [first] = await storage.jobs.commitAll([{ op: 'create', spec }]);
    if (!first.ok) return expect.fail(first.error.message);
    const id = first.job.id;
    // A repository that wrote nothing yet (the node restarted) inserts a given id unread.
    await storage.close();
    storage = await openStorage(path);
    const again = await storage.jobs.commitAll([
      { op: 'create', spec, opts: { id } },
      { op: 'create', spec: { ...spec, name: 'other' } },
      { op: 'update', id, change: { status: 'running', reason: 'started' } },
    ]);
    expect(again.map((r) => (r.ok ? r.job.status : `${r.error.kind}: ${r.error.message}`))).toEqual([`conflict: job ${id} already exists`, 'pending', 'running']);
    expect(await storage.jobs.count()).toBe(2);
    expect((await storage.events.listFor(id)).map((e) => e.to_status)).toEqual(['pending', 'running']);
    // Ended, it is no longer among the jobs the repository remembers: the id is found taken all the same.
    await storage.jobs.commitAll([{ op: 'update', id, change: { status: 'completed', reason: 'done', exit_code: 0 } }]);
    const [late] = await storage.jobs.commitAll([{ op: 'create', spec, opts: { id } }]);
    expect(late).toMatchObject({ ok: false, error: { kind: 'conflict' } });
    expect(await storage.jobs.get(id)).toMatchObject({ status: 'completed', exit_code: 0 });
  });
});

describe('job journal', () => {
  it('shares commits among concurrent writers and resolves each only once its write is stored', async () => {
    const journal = new JobJournal(storage.jobs);
    const jobs = await Promise.all(Array.from({ length: 200 }, () => journal.create(spec)));
    // Read through a second connection: what a writer was told is in the file.
    const other = await openStorage(path);
    try {
      expect(await other.jobs.count()).toBe(200);
    } finally {
      await other.close();
    }
    await Promise.all(jobs.map((j) => journal.change(j.id, { status: 'running', reason: 'started' })));
    await Promise.all(jobs.map((j) => journal.change(j.id, { status: 'completed', reason: 'done', exit_code: 0 })));
    expect(await storage.jobs.count({ status: 'completed' })).toBe(200);
    const { writes, commits } = journal.stats;
    expect(writes).toBe(600);
    // Writes made together commit together: a handful of transactions, not one each.
    expect(commits).toBeLessThanOrEqual(30);
  });

  it('keeps one job\'s writes in the order they were made, across batches', async () => {
    const journal = new JobJournal(storage.jobs);
    const job = await journal.create(spec);
    const writes = [
      journal.change(job.id, { reason: 'waiting for resources: not enough cpu' }),
      journal.change(job.id, { status: 'running', reason: 'started' }),
      journal.change(job.id, { status: 'failed', reason: 'exited with code 3', exit_code: 3 }),
    ];
    await Promise.all(writes);
    expect((await storage.events.listFor(job.id)).map((e) => e.to_status)).toEqual(['pending', 'pending', 'running', 'failed']);
  });

  it('rejects a refused write alone and every write of a transaction the database failed', async () => {
    const journal = new JobJournal(storage.jobs);
    const job = await journal.create(spec);
    const refused = journal.change(job.id, { status: 'completed', reason: 'too early' });
    const fine = journal.change(job.id, { status: 'running', reason: 'started' });
    await expect(refused).rejects.toMatchObject({ kind: 'conflict' });
    await expect(fine).resolves.toMatchObject({ status: 'running' });

    await storage.close();
    const lost = await Promise.allSettled([journal.create(spec), journal.change(job.id, { status: 'failed', reason: 'x' })]);
    expect(lost.map((r) => r.status)).toEqual(['rejected', 'rejected']);
    expect(lost.every((r) => r.status === 'rejected' && !(r.reason instanceof DmsError && r.reason.kind === 'conflict'))).toBe(true);
    await journal.drain();
  });
});
