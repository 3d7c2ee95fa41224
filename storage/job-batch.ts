/**
 * The job table's SQL, written directly: a group commit, and reading jobs by id (`readJobRows`).
 * Through the ORM's unit of work a batch spends more on change tracking than SQLite spends
 * storing it; written directly it is one SELECT of the jobs it changes that were not written
 * lately (RecentJobRows), then one INSERT for the jobs it creates, one INSERT … ON CONFLICT DO
 * UPDATE for those it changes and one INSERT for its events, in one transaction
 * (./connection.ts). The rules (what a new job is, which transitions are allowed) are
 * ./job-rules.ts. Columns and their encoding follow the migrations and the ORM's mapping (JSON as
 * text, times as epoch milliseconds): a new job column must be added here as well.
 */
import type { EntityManager } from '@mikro-orm/sqlite';
import { isTerminal, type Job, type JobSpecInput } from '../behaviors/jobs/schema.js';
import { rememberNewest } from '../runtime/bounded-map.js';
import { DmsError, notFound } from '../runtime/errors.js';
import { dateColumn, jsonColumn, type SqlConnection, textColumn } from './connection.js';
import {
  againEvent,
  creationEvent,
  type JobChange,
  type JobCreateOptions,
  type JobRow,
  newJobRow,
  type NewJobEvent,
  takenId,
  toJob,
  transition,
} from './job-rules.js';

/** One write of a group commit (JobRepository.commitAll). */
export type JobWrite =
  | { op: 'create'; spec: JobSpecInput; opts?: JobCreateOptions }
  | { op: 'update'; id: string; change: JobChange };

/** What became of one write of a group commit: the job as that write left it, or why it was refused. */
export type JobWriteResult = { ok: true; job: Job } | { ok: false; error: DmsError };

const JOB_COLUMNS = [
  'id',
  'name',
  'image',
  'command',
  'environment',
  'secrets',
  'resources',
  'executor',
  'status',
  'node',
  'exit_code',
  'error',
  'pending_reason',
  'timeout_s',
  'container_id',
  'placement',
  'requester',
  'attempts',
  'outputs',
  'inputs',
  'manifest',
  'ports',
  'ensemble',
  'part',
  'created_at',
  'updated_at',
] as const;
/** What a transition can change; the other columns are fixed when the job is created. */
const MUTABLE = ['status', 'node', 'exit_code', 'error', 'pending_reason', 'container_id', 'attempts', 'outputs', 'manifest', 'updated_at'] as const;
const EVENT_COLUMNS = ['job_id', 'at', 'from_status', 'to_status', 'reason'] as const;

/** Rows per statement, keeping bound parameters under SQLite's oldest limit (999). */
const JOB_ROWS_PER_STATEMENT = Math.floor(999 / JOB_COLUMNS.length);
const EVENT_ROWS_PER_STATEMENT = Math.floor(999 / EVENT_COLUMNS.length);
const IDS_PER_SELECT = 900;

const upsertTail = (columns: readonly string[]) => `on conflict (\`id\`) do update set ${columns.map((c) => `\`${c}\` = excluded.\`${c}\``).join(', ')}`;
const UPSERT_TAIL = upsertTail(MUTABLE);
/** A job placed here again (JobCreateOptions.again) takes every column of the run it replaces. */
const REPLACE_TAIL = upsertTail(JOB_COLUMNS.filter((c) => c !== 'id'));

/**
 * The stored rows of the jobs `ids` (those that exist, in no particular order), read directly
 * like the writes: through the ORM's `findOne` a job read cost about three times the CPU
 * (bench/RESULTS.md, bench:placement, has the figures). Inside `em`'s transaction when it has one.
 */
export async function readJobRows(em: EntityManager, ids: readonly string[]): Promise<JobRow[]> {
  const conn = em.getConnection();
  const ctx = em.getTransactionContext();
  return selectJobRows((sql, params) => conn.execute<Record<string, unknown>[]>(sql, [...params], 'all', ctx), ids);
}

/** The rows of the jobs `ids`, read through `all` (the ORM's connection, or a batch's). */
async function selectJobRows(all: SqlConnection['all'], ids: readonly string[]): Promise<JobRow[]> {
  const rows: JobRow[] = [];
  for (const part of chunks(ids, IDS_PER_SELECT)) {
    for (const r of await all(`select * from \`job\` where \`id\` in (${marks(part.length)})`, part)) rows.push(fromColumns(r));
  }
  return rows;
}

/**
 * The stored columns of the jobs this process wrote last that have not ended, by id: what a
 * batch would otherwise read back before changing them. Every write to the job table is a
 * group commit of the one repository over the database (`JobRepository.commitAll`), so what
 * it last committed is what is stored. Kept as the stored values, not as rows: a row handed
 * to a caller (as a Job) could be changed by it, a string cannot.
 */
export type RecentJobRows = Map<string, readonly unknown[]>;

/** Jobs under way whose stored columns a repository keeps (RecentJobRows): beyond it, a change reads its row first. */
export const RECENT_JOB_ROWS = 2048;

/**
 * Applies `writes` in order in one transaction (see JobRepository.commitAll). Jobs in `recent`
 * are not read back. A new job with an id given (one placed here by another node) is not
 * looked for first when nothing else needs reading: it is inserted, and an id already stored
 * fails that transaction, which is then written again the way that reads every id first.
 */
export async function writeBatch(conn: SqlConnection, writes: readonly JobWrite[], recent: RecentJobRows = new Map()): Promise<JobWriteResult[]> {
  try {
    return await writeOnce(conn, writes, recent, true);
  } catch (e) {
    if (!isIdTaken(e)) throw e;
    return writeOnce(conn, writes, recent, false);
  }
}

/** `trustNewIds`: a new job's given id that nothing else made the batch read is taken to be free. */
async function writeOnce(conn: SqlConnection, writes: readonly JobWrite[], recent: RecentJobRows, trustNewIds: boolean): Promise<JobWriteResult[]> {
  const rows = new Map<string, JobRow>();
  const unread = new Set<string>();
  const newIds: string[] = [];
  for (const w of writes) {
    const id = w.op === 'update' ? w.id : w.opts?.id;
    if (id === undefined || rows.has(id)) continue;
    const known = recent.get(id);
    if (known) rows.set(id, rowOf(known));
    else if (w.op === 'update') unread.add(id);
    else newIds.push(id);
  }
  // Whether a given id is taken costs nothing to ask on a read made anyway.
  if (unread.size > 0 || !trustNewIds) for (const id of newIds) unread.add(id);
  if (unread.size > 0) for (const row of await selectJobRows(conn.all, [...unread])) rows.set(row.id, row);

  const created = new Set<JobRow>();
  const replaced = new Set<JobRow>();
  const changed = new Set<JobRow>();
  const events: NewJobEvent[] = [];
  const now = new Date();
  const results = writes.map((w): JobWriteResult => {
    try {
      let row: JobRow;
      if (w.op === 'create') {
        const earlier = w.opts?.id === undefined ? undefined : rows.get(w.opts.id);
        const refused = earlier && takenId(earlier, w.opts!);
        if (refused) throw refused;
        row = newJobRow(w.spec, w.opts ?? {}, now);
        rows.set(row.id, row);
        if (earlier) {
          // Its changes of this batch would otherwise be written over the new run's (changes are written last).
          changed.delete(earlier);
          replaced.add(row);
          events.push(againEvent(row, earlier));
        } else {
          created.add(row);
          events.push(creationEvent(row));
        }
      } else {
        const found = rows.get(w.id);
        if (!found) throw notFound(`job ${w.id} not found`);
        row = found;
        events.push(transition(row, w.change, now));
        if (!created.has(row) && !replaced.has(row)) changed.add(row);
      }
      // A snapshot: later writes of the batch may change the row again.
      return { ok: true, job: toJob(row) };
    } catch (e) {
      if (e instanceof DmsError) return { ok: false, error: e };
      throw e;
    }
  });

  const columns = new Map<JobRow, unknown[]>();
  for (const row of [...created, ...replaced, ...changed]) columns.set(row, toColumns(row));
  const statements: string[] = [];
  // New jobs are inserted, never upserted: an id already stored fails the transaction rather than overwriting its job.
  for (const [set, tail] of [[created, ''], [replaced, ` ${REPLACE_TAIL}`], [changed, ` ${UPSERT_TAIL}`]] as const) {
    for (const part of chunks([...set], JOB_ROWS_PER_STATEMENT)) {
      const sql = `insert into \`job\` (${names(JOB_COLUMNS)}) values ${tuples(part.length, JOB_COLUMNS.length)}${tail}`;
      statements.push(conn.format(sql, part.flatMap((row) => columns.get(row)!)));
    }
  }
  for (const part of chunks(events, EVENT_ROWS_PER_STATEMENT)) {
    const sql = `insert into \`job_event\` (${names(EVENT_COLUMNS)}) values ${tuples(part.length, EVENT_COLUMNS.length)}`;
    statements.push(conn.format(sql, part.flatMap((e) => [e.job_id, e.at.getTime(), e.from_status, e.to_status, e.reason])));
  }
  if (statements.length > 0) await conn.commit(statements);
  for (const [row, stored] of columns) {
    if (isTerminal(row.status)) recent.delete(row.id);
    else rememberNewest(recent, row.id, stored, RECENT_JOB_ROWS);
  }
  return results;
}

/** SQLite refusing a new job's row because its id is stored already. */
const isIdTaken = (e: unknown): boolean => e instanceof Error && /UNIQUE constraint failed: job\.id\b/.test(e.message);

/** A row from its stored columns (JOB_COLUMNS' order), as a read would give it. */
const rowOf = (stored: readonly unknown[]): JobRow => fromColumns(Object.fromEntries(JOB_COLUMNS.map((c, i) => [c, stored[i]])));

function toColumns(row: JobRow): unknown[] {
  return [
    row.id,
    row.name,
    row.image,
    JSON.stringify(row.command),
    JSON.stringify(row.environment),
    JSON.stringify(row.secrets ?? {}),
    JSON.stringify(row.resources),
    row.executor,
    row.status,
    row.node ?? null,
    row.exit_code ?? null,
    row.error ?? null,
    row.pending_reason ?? null,
    row.timeout_s ?? null,
    row.container_id ?? null,
    row.placement ? JSON.stringify(row.placement) : null,
    row.requester ?? null,
    JSON.stringify(row.attempts ?? []),
    JSON.stringify(row.outputs ?? []),
    JSON.stringify(row.inputs ?? []),
    row.manifest ?? null,
    JSON.stringify(row.ports ?? []),
    row.ensemble ?? null,
    row.part ?? null,
    row.created_at.getTime(),
    row.updated_at.getTime(),
  ];
}

function fromColumns(r: Record<string, unknown>): JobRow {
  const int = (v: unknown) => (v === null || v === undefined ? null : Number(v));
  return {
    id: String(r.id),
    name: String(r.name),
    image: String(r.image),
    command: jsonColumn(r.command),
    environment: jsonColumn(r.environment),
    secrets: r.secrets === null || r.secrets === undefined ? {} : jsonColumn(r.secrets),
    resources: jsonColumn(r.resources),
    executor: String(r.executor),
    status: String(r.status) as JobRow['status'],
    node: textColumn(r.node),
    exit_code: int(r.exit_code),
    error: textColumn(r.error),
    pending_reason: textColumn(r.pending_reason),
    timeout_s: int(r.timeout_s),
    container_id: textColumn(r.container_id),
    placement: r.placement === null || r.placement === undefined ? null : jsonColumn(r.placement),
    requester: textColumn(r.requester),
    attempts: r.attempts === null || r.attempts === undefined ? [] : jsonColumn(r.attempts),
    outputs: r.outputs === null || r.outputs === undefined ? [] : jsonColumn(r.outputs),
    inputs: r.inputs === null || r.inputs === undefined ? [] : jsonColumn(r.inputs),
    manifest: textColumn(r.manifest),
    ports: r.ports === null || r.ports === undefined ? [] : jsonColumn(r.ports),
    ensemble: textColumn(r.ensemble),
    part: textColumn(r.part),
    created_at: dateColumn(r.created_at),
    updated_at: dateColumn(r.updated_at),
  };
}

const names = (columns: readonly string[]) => columns.map((c) => `\`${c}\``).join(', ');
const marks = (n: number) => new Array<string>(n).fill('?').join(', ');
const tuples = (rows: number, columns: number) => new Array<string>(rows).fill(`(${marks(columns)})`).join(', ');

function chunks<T>(items: readonly T[], size: number): T[][] {
  const out: T[][] = [];
  for (let i = 0; i < items.length; i += size) out.push(items.slice(i, i + size));
  return out;
}
