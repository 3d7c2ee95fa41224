import { type MikroORM, raw } from '@mikro-orm/sqlite';
import type { Job, JobEvent, JobSpecInput, JobStatus } from '../behaviors/jobs/schema.js';
import { JobEntity, JobEventEntity } from './entities.js';
import { withConnection } from './connection.js';
import { readBoundedPage } from './pages.js';
import { type JobWrite, type JobWriteResult, readJobRows, type RecentJobRows, writeBatch } from './job-batch.js';
import type { JobChange, JobCreateOptions, JobEventRow } from './job-rules.js';
import { toJob } from './job-rules.js';

export type { JobChange, JobCreateOptions } from './job-rules.js';
export type { JobWrite, JobWriteResult } from './job-batch.js';

export interface JobFilter {
  status?: JobStatus | JobStatus[];
  executor?: string;
  /** Only the parts of this ensemble. */
  ensemble?: string;
}

export interface JobListOptions extends JobFilter {
  limit?: number;
  offset?: number;
  /** By submission: oldest first unless asked (recovery re-queues in that order). */
  order?: 'asc' | 'desc';
}

/** A job not yet ended that mounts a volume (JobRepository.mounting). */
export interface VolumeMount {
  id: string;
  status: JobStatus;
  writable: boolean;
}

/** Rows read at a time while a list bounded in bytes fills: what one read holds beyond the page. */
const LIST_SLICE = 32;

export class JobRepository {
  /** What this repository last committed of the jobs under way: the only writer of the job table. */
  private readonly recent: RecentJobRows = new Map();

  constructor(private readonly orm: MikroORM) {}

  /**
   * Stores a new pending job and its first event in one transaction; resolves once both are
   * committed. A batch of one: there is one write path (commitAll), whoever writes.
   */
  async create(spec: JobSpecInput, opts: JobCreateOptions = {}): Promise<Job> {
    return only(await this.commitAll([{ op: 'create', spec, opts }]));
  }

  async get(id: string): Promise<Job | null> {
    const [row] = await readJobRows(this.orm.em.fork(), [id]);
    return row ? toJob(row) : null;
  }

  /** Jobs in submission order, or its reverse. */
  /**
   * Jobs in submission order, or its reverse: at most `limit`, and with `maxBytes` no more of
   * them than that as JSON (always one at least). A job's spec may be large (a 1 MiB command),
   * so a page of 1,000 of them was a 137 MB reply that took the node to 1.8 GB and held its
   * event loop for 11 s; read in slices, such a page stops where the bytes do.
   */
  async list(opts: JobListOptions & { maxBytes?: number } = {}): Promise<Job[]> {
    const order = opts.order ?? 'asc';
    const em = this.orm.em.fork();
    // Jobs of one batch share their created_at: the row's insertion order (rowid) is their
    // submission order. Made for each query: the ORM takes a raw() fragment once.
    const orderBy = () => ({ created_at: order, [raw('rowid')]: order });
    if (opts.maxBytes === undefined) return (await em.find(JobEntity, where(opts), { orderBy: orderBy(), limit: opts.limit, offset: opts.offset })).map(toJob);
    const read = async (offset: number, limit: number) => {
      const rows = await em.find(JobEntity, where(opts), { orderBy: orderBy(), limit, offset });
      em.clear();
      return rows.map(toJob);
    };
    return readBoundedPage({ offset: opts.offset ?? 0, limit: opts.limit, maxBytes: opts.maxBytes, slice: LIST_SLICE }, read, (job) => JSON.stringify(job).length);
  }

  /**
   * The jobs not yet ended (pending or running) whose inputs mount volume `name`, oldest first,
   * at most `limit`: a volume they mount is not deleted, nor snapshotted while one writes it.
   */
  async mounting(name: string, limit = 8): Promise<VolumeMount[]> {
    const rows = await this.orm.em.getConnection().execute<{ id: string; status: JobStatus; writable: number | null }[]>(
      "select j.`id`, j.`status`, max(coalesce(json_extract(i.value, '$.writable'), 0)) as writable " +
        "from `job` j, json_each(j.`inputs`) i where j.`status` in ('pending', 'running') and json_extract(i.value, '$.source') = ? " +
        'group by j.`id` order by j.`created_at`, j.rowid limit ?',
      [`volume:${name}`, limit],
    );
    return rows.map((r) => ({ id: r.id, status: r.status, writable: Boolean(r.writable) }));
  }

  /**
   * The content the inputs of jobs not yet ended name (a CID, or the CID a `job:` source resolved
   * to), each once: retention keeps their blocks, which a job fetches and writes out only when it starts.
   */
  async inputsUnderWay(): Promise<string[]> {
    const rows = await this.orm.em.getConnection().execute<{ cid: string | null }[]>(
      "select distinct coalesce(json_extract(i.value, '$.cid'), json_extract(i.value, '$.source')) as cid " +
        "from `job` j, json_each(j.`inputs`) i where j.`status` in ('pending', 'running')",
    );
    return rows.map((r) => r.cid).filter((c): c is string => typeof c === 'string' && !c.startsWith('volume:') && !c.startsWith('job:'));
  }

  async count(filter: JobFilter = {}): Promise<number> {
    return this.orm.em.fork().count(JobEntity, where(filter));
  }

  /**
   * Applies `change` and records it as an event in one transaction. Throws not_found for an
   * unknown id and conflict for a transition the job model forbids (e.g. out of a final state).
   */
  async update(id: string, change: JobChange): Promise<Job> {
    return only(await this.commitAll([{ op: 'update', id, change }]));
  }

  /**
   * Group commit: applies `writes` in order in one transaction, so many callers share one
   * commit (one fsync) instead of paying one each. A write the job model refuses (invalid
   * spec, unknown id, forbidden transition) is reported in its slot and leaves the job as it
   * was; the other writes still commit. A failure of the database itself rejects the whole
   * batch and stores none of it. Later writes to a job see the earlier ones of the batch.
   */
  async commitAll(writes: readonly JobWrite[]): Promise<JobWriteResult[]> {
    if (writes.length === 0) return [];
    return withConnection(this.orm, (conn) => writeBatch(conn, writes, this.recent));
  }
}

export class JobEventRepository {
  constructor(private readonly orm: MikroORM) {}

  /** A job's history, oldest first; empty for an unknown id. */
  async listFor(jobId: string): Promise<JobEvent[]> {
    const rows = await this.orm.em.fork().find(JobEventEntity, { job_id: jobId }, { orderBy: { id: 'asc' } });
    return rows.map(toEvent);
  }
}

/** The job of a one-write batch, or the error that write was refused with. */
function only([result]: JobWriteResult[]): Job {
  if (!result.ok) throw result.error;
  return result.job;
}

function where(filter: JobFilter) {
  return {
    ...(filter.status === undefined ? {} : { status: Array.isArray(filter.status) ? { $in: filter.status } : filter.status }),
    ...(filter.executor === undefined ? {} : { executor: filter.executor }),
    ...(filter.ensemble === undefined ? {} : { ensemble: filter.ensemble }),
  };
}

function toEvent(row: JobEventRow): JobEvent {
  return {
    id: row.id,
    job_id: row.job_id,
    at: row.at.toISOString(),
    from_status: row.from_status ?? null,
    to_status: row.to_status,
    reason: row.reason,
  };
}
