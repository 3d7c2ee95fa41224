/**
 * The job table's SQL, written directly: a group commit, and reading jobs by id (`readJobRows`,
 * which the commit uses too). Through the ORM's unit of work a batch spends more on change
 * tracking than SQLite spends storing it; written directly it is one SELECT of the jobs it
 * changes, one INSERT … ON CONFLICT DO UPDATE for every job it creates or changes, and one
 * INSERT for its events, all inside the caller's transaction. The rules (what a new job is,
 * which transitions are allowed) are ./job-rules.ts, the same the repository's other writes
 * apply. Columns and their encoding follow the migrations and the ORM's mapping (JSON as
 * text, times as epoch milliseconds): a new job column must be added here as well.
 */
import type { EntityManager } from '@mikro-orm/sqlite';
import type { Job, JobSpecInput } from '../behaviors/jobs/schema.js';
import { DmsError, notFound } from '../runtime/errors.js';
import {
  creationEvent,
  type JobChange,
  type JobCreateOptions,
  type JobRow,
  newJobRow,
  type NewJobEvent,
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

const UPSERT_TAIL = `on conflict (\`id\`) do update set ${MUTABLE.map((c) => `\`${c}\` = excluded.\`${c}\``).join(', ')}`;

/**
 * The stored rows of the jobs `ids` (those that exist, in no particular order), read directly
 * like the writes: through the ORM's `findOne` a job read cost about three times the CPU
 * (bench/RESULTS.md, bench:placement, has the figures). Inside `em`'s transaction when it has one.
 */
export async function readJobRows(em: EntityManager, ids: readonly string[]): Promise<JobRow[]> {
  const conn = em.getConnection();
  const ctx = em.getTransactionContext();
  const rows: JobRow[] = [];
  for (const part of chunks(ids, IDS_PER_SELECT)) {
    const found = await conn.execute<Record<string, unknown>[]>(`select * from \`job\` where \`id\` in (${marks(part.length)})`, part, 'all', ctx);
    for (const r of found) rows.push(fromColumns(r));
  }
  return rows;
}

/** Applies `writes` in order inside `em`'s transaction (see JobRepository.commitAll). */
export async function writeBatch(em: EntityManager, writes: readonly JobWrite[]): Promise<JobWriteResult[]> {
  const conn = em.getConnection();
  const ctx = em.getTransactionContext();
  const wanted = new Set<string>();
  for (const w of writes) {
    if (w.op === 'update') wanted.add(w.id);
    else if (w.opts?.id !== undefined) wanted.add(w.opts.id);
  }
  const rows = new Map<string, JobRow>();
  for (const row of await readJobRows(em, [...wanted])) rows.set(row.id, row);

  const touched = new Set<JobRow>();
  const events: NewJobEvent[] = [];
  const now = new Date();
  const results = writes.map((w): JobWriteResult => {
    try {
      let row: JobRow;
      if (w.op === 'create') {
        if (w.opts?.id !== undefined && rows.has(w.opts.id)) throw new DmsError('conflict', `job ${w.opts.id} already exists`);
        row = newJobRow(w.spec, w.opts ?? {}, now);
        rows.set(row.id, row);
        events.push(creationEvent(row));
      } else {
        const found = rows.get(w.id);
        if (!found) throw notFound(`job ${w.id} not found`);
        row = found;
        events.push(transition(row, w.change, now));
      }
      touched.add(row);
      // A snapshot: later writes of the batch may change the row again.
      return { ok: true, job: toJob(row) };
    } catch (e) {
      if (e instanceof DmsError) return { ok: false, error: e };
      throw e;
    }
  });

  for (const part of chunks([...touched], JOB_ROWS_PER_STATEMENT)) {
    const sql = `insert into \`job\` (${names(JOB_COLUMNS)}) values ${tuples(part.length, JOB_COLUMNS.length)} ${UPSERT_TAIL}`;
    await conn.execute(sql, part.flatMap(toColumns), 'run', ctx);
  }
  for (const part of chunks(events, EVENT_ROWS_PER_STATEMENT)) {
    const sql = `insert into \`job_event\` (${names(EVENT_COLUMNS)}) values ${tuples(part.length, EVENT_COLUMNS.length)}`;
    await conn.execute(sql, part.flatMap((e) => [e.job_id, e.at.getTime(), e.from_status, e.to_status, e.reason]), 'run', ctx);
  }
  return results;
}

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
  const text = (v: unknown) => (v === null || v === undefined ? null : String(v));
  const int = (v: unknown) => (v === null || v === undefined ? null : Number(v));
  return {
    id: String(r.id),
    name: String(r.name),
    image: String(r.image),
    command: json(r.command),
    environment: json(r.environment),
    secrets: r.secrets === null || r.secrets === undefined ? {} : json(r.secrets),
    resources: json(r.resources),
    executor: String(r.executor),
    status: String(r.status) as JobRow['status'],
    node: text(r.node),
    exit_code: int(r.exit_code),
    error: text(r.error),
    pending_reason: text(r.pending_reason),
    timeout_s: int(r.timeout_s),
    container_id: text(r.container_id),
    placement: r.placement === null || r.placement === undefined ? null : json(r.placement),
    requester: text(r.requester),
    attempts: r.attempts === null || r.attempts === undefined ? [] : json(r.attempts),
    outputs: r.outputs === null || r.outputs === undefined ? [] : json(r.outputs),
    inputs: r.inputs === null || r.inputs === undefined ? [] : json(r.inputs),
    manifest: text(r.manifest),
    ports: r.ports === null || r.ports === undefined ? [] : json(r.ports),
    ensemble: text(r.ensemble),
    part: text(r.part),
    created_at: date(r.created_at),
    updated_at: date(r.updated_at),
  };
}

const json = <T>(v: unknown): T => (typeof v === 'string' ? (JSON.parse(v) as T) : (v as T));
const date = (v: unknown): Date => (typeof v === 'number' || /^\d+$/.test(String(v)) ? new Date(Number(v)) : new Date(String(v)));
const names = (columns: readonly string[]) => columns.map((c) => `\`${c}\``).join(', ');
const marks = (n: number) => new Array<string>(n).fill('?').join(', ');
const tuples = (rows: number, columns: number) => new Array<string>(rows).fill(`(${marks(columns)})`).join(', ');

function chunks<T>(items: readonly T[], size: number): T[][] {
  const out: T[][] = [];
  for (let i = 0; i < items.length; i += size) out.push(items.slice(i, i + size));
  return out;
}
