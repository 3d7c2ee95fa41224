import { describe, expect, it } from 'vitest';
import type { Job, JobSpecInput } from '../../behaviors/jobs/schema.js';
import type { SqlConnection } from '../../storage/connection.js';
import { type JobWriteResult, RECENT_JOB_ROWS, type RecentJobRows, writeBatch } from '../../storage/job-batch.js';

const spec: JobSpecInput = { name: 'j', image: 'none', executor: 'null', resources: { cpu: { cores: 0.1 }, memory: { size: 1024 } } };

/**
 * A connection that stores nothing: it counts the reads a batch makes (answering none found)
 * and keeps the statements of each commit; `refuse` makes the next commit fail as SQLite does.
 */
function recorder() {
  const log = { reads: 0, commits: [] as string[][], refuse: null as Error | null };
  const conn: SqlConnection = {
    format: (sql, params) => `${sql} -- ${JSON.stringify(params)}`,
    all: async () => {
      log.reads++;
      return [];
    },
    commit: async (statements) => {
      const refused = log.refuse;
      log.refuse = null;
      if (refused) throw refused;
      log.commits.push([...statements]);
    },
  };
  return { conn, log };
}

/** The job of a one-write batch that was applied. */
function only(results: JobWriteResult[]): Job {
  expect(results).toHaveLength(1);
  const [result] = results;
  if (!result.ok) throw result.error;
  return result.job;
}

describe('group commit of the jobs written lately (storage/job-batch.ts)', () => {
  it('changes a job it wrote without reading it back, from what it stored, not from what a caller did to the job it was given', async () => {
    const { conn, log } = recorder();
    const recent: RecentJobRows = new Map();
    const created = only(await writeBatch(conn, [{ op: 'create', spec }], recent));
    expect(log.reads).toBe(0);
    expect(log.commits[0][0]).toMatch(/^insert into `job` .* values \([^)]*\) -- /);
    expect(log.commits[0][0]).not.toContain('on conflict');
    // The caller owns the job it was handed; the next batch starts from what was stored.
    created.attempts.push({ node: 'scribbled', started_at: 'x', ended_at: null, outcome: 'lost', reason: null });

    const running = only(await writeBatch(conn, [{ op: 'update', id: created.id, change: { status: 'running', reason: 'started' } }], recent));
    expect(log.reads).toBe(0);
    expect(running).toMatchObject({ id: created.id, status: 'running', attempts: [] });
    expect(log.commits[1][0]).toContain('on conflict (`id`) do update');

    // An ended job is no longer kept: a later change reads it (and here finds nothing).
    only(await writeBatch(conn, [{ op: 'update', id: created.id, change: { status: 'completed', reason: 'done', exit_code: 0 } }], recent));
    expect(recent.has(created.id)).toBe(false);
    const late = writeBatch(conn, [{ op: 'update', id: created.id, change: { reason: 'late' } }], recent).then(only);
    await expect(late).rejects.toThrow(`job ${created.id} not found`);
    expect(log.reads).toBe(1);
  });

  it('inserts a job placed here under its given id unread, and when that id is taken writes the batch again reading every id', async () => {
    const { conn, log } = recorder();
    const id = '0b6c3a4e-52f5-4d43-9bd7-2a4a7cf3f0d1';
    log.refuse = Object.assign(new Error('SQLITE_CONSTRAINT: UNIQUE constraint failed: job.id'), { code: 'SQLITE_CONSTRAINT' });
    const results = await writeBatch(conn, [{ op: 'create', spec, opts: { id } }, { op: 'create', spec }], new Map());
    // First as an insert nothing read for, refused; then with a read, which here finds nothing taken.
    expect(log.reads).toBe(1);
    expect(log.commits).toHaveLength(1);
    expect(results.map((r) => r.ok)).toEqual([true, true]);

    // Any other failure of the database is the caller's, as before: not written again.
    log.refuse = new Error('SQLITE_FULL: database or disk is full');
    await expect(writeBatch(conn, [{ op: 'create', spec, opts: { id: '6f1f8a57-8a60-4f1e-9a55-5a8f7f3f6c11' } }], new Map())).rejects.toThrow('SQLITE_FULL');
    expect(log.reads).toBe(1);
  });

  it('keeps at most RECENT_JOB_ROWS jobs, the newest', async () => {
    const { conn } = recorder();
    const recent: RecentJobRows = new Map();
    const results = await writeBatch(conn, Array.from({ length: RECENT_JOB_ROWS + 10 }, () => ({ op: 'create' as const, spec })), recent);
    expect(recent.size).toBe(RECENT_JOB_ROWS);
    const ids = results.map((r) => (r.ok ? r.job.id : ''));
    expect(recent.has(ids[0])).toBe(false);
    expect(recent.has(ids.at(-1)!)).toBe(true);
  });
});
