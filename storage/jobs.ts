import { randomUUID } from 'node:crypto';
import type { InferEntity } from '@mikro-orm/core';
import type { EntityManager, MikroORM } from '@mikro-orm/sqlite';
import { z } from 'zod';
import {
  isTerminal,
  JobSpecSchema,
  parseWith,
  type Job,
  type JobEvent,
  type JobSpecInput,
  type JobStatus,
} from '../behaviors/jobs/schema.js';
import { DmsError, notFound } from '../runtime/errors.js';
import { JobEntity, JobEventEntity } from './entities.js';

type JobRow = InferEntity<typeof JobEntity>;
type JobEventRow = InferEntity<typeof JobEventEntity>;

export interface JobCreateOptions {
  /** Keep the id a job already has (e.g. one submitted on another node); a new uuid otherwise. */
  id?: string;
  node?: string | null;
  pending_reason?: string | null;
}

/**
 * A change to a job, recorded as one event. Without `status` the job keeps its status and the
 * event notes why the other fields changed (e.g. a new pending reason, a reattached container).
 */
export interface JobChange {
  status?: JobStatus;
  /** Why: stored on the event, and as `error` when the job fails without an explicit one. */
  reason: string;
  node?: string | null;
  exit_code?: number | null;
  error?: string | null;
  pending_reason?: string | null;
  container_id?: string | null;
}

/** One write of a group commit (JobRepository.commitAll). */
export type JobWrite =
  | { op: 'create'; spec: JobSpecInput; opts?: JobCreateOptions }
  | { op: 'update'; id: string; change: JobChange };

/** What became of one write of a group commit: the job as that write left it, or why it was refused. */
export type JobWriteResult = { ok: true; job: Job } | { ok: false; error: DmsError };

export interface JobFilter {
  status?: JobStatus | JobStatus[];
  executor?: string;
}

export interface JobListOptions extends JobFilter {
  limit?: number;
  offset?: number;
}

// pending → running → completed | failed; a pending job can also fail (cancelled, never
// scheduled). Terminal jobs never change, so a late executor report cannot resurrect one.
const NEXT: Record<JobStatus, readonly JobStatus[]> = {
  pending: ['pending', 'running', 'failed'],
  running: ['running', 'completed', 'failed'],
  completed: [],
  failed: [],
};

export class JobRepository {
  constructor(private readonly orm: MikroORM) {}

  /** Stores a new pending job and its first event; resolves once both are committed. */
  async create(spec: JobSpecInput, opts: JobCreateOptions = {}): Promise<Job> {
    const em = this.orm.em.fork();
    const row = insertJob(em, spec, opts, new Date());
    // One flush is one transaction: the job never exists without its creation event.
    await em.flush();
    return toJob(row);
  }

  async get(id: string): Promise<Job | null> {
    const row = await this.orm.em.fork().findOne(JobEntity, { id });
    return row ? toJob(row) : null;
  }

  /** Jobs in submission order. */
  async list(opts: JobListOptions = {}): Promise<Job[]> {
    const rows = await this.orm.em.fork().find(JobEntity, where(opts), {
      orderBy: { created_at: 'asc', id: 'asc' },
      limit: opts.limit,
      offset: opts.offset,
    });
    return rows.map(toJob);
  }

  async count(filter: JobFilter = {}): Promise<number> {
    return this.orm.em.fork().count(JobEntity, where(filter));
  }

  /**
   * Applies `change` and records it as an event in one transaction. Throws not_found for an
   * unknown id and conflict for a transition the job model forbids (e.g. out of a final state).
   */
  async update(id: string, change: JobChange): Promise<Job> {
    const row = await this.orm.em.fork().transactional(async (em) => {
      const row = await em.findOne(JobEntity, { id });
      if (!row) throw notFound(`job ${id} not found`);
      applyChange(em, row, change, new Date());
      return row;
    });
    return toJob(row);
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
    return this.orm.em.fork().transactional(async (em) => {
      const wanted = new Set<string>();
      for (const w of writes) {
        if (w.op === 'update') wanted.add(w.id);
        else if (w.opts?.id !== undefined) wanted.add(w.opts.id);
      }
      const rows = new Map<string, JobRow>();
      if (wanted.size > 0) for (const row of await em.find(JobEntity, { id: { $in: [...wanted] } })) rows.set(row.id, row);
      const now = new Date();
      return writes.map((w): JobWriteResult => {
        try {
          if (w.op === 'create') {
            if (w.opts?.id !== undefined && rows.has(w.opts.id)) throw new DmsError('conflict', `job ${w.opts.id} already exists`);
            const row = insertJob(em, w.spec, w.opts ?? {}, now);
            rows.set(row.id, row);
            return { ok: true, job: toJob(row) };
          }
          const row = rows.get(w.id);
          if (!row) throw notFound(`job ${w.id} not found`);
          applyChange(em, row, w.change, now);
          return { ok: true, job: toJob(row) };
        } catch (e) {
          if (e instanceof DmsError) return { ok: false, error: e };
          throw e;
        }
      });
    });
  }
}

/** A new pending job and its creation event, staged in `em`; throws invalid naming bad fields. */
function insertJob(em: EntityManager, spec: JobSpecInput, opts: JobCreateOptions, now: Date): JobRow {
  const valid = parseWith(JobSpecSchema, spec, 'job spec');
  const row = em.create(JobEntity, {
    id: opts.id === undefined ? randomUUID() : parseWith(z.uuid(), opts.id, 'job id'),
    name: valid.name,
    image: valid.image,
    command: valid.command,
    environment: valid.environment,
    resources: valid.resources,
    executor: valid.executor,
    status: 'pending',
    node: opts.node ?? null,
    exit_code: null,
    error: null,
    pending_reason: opts.pending_reason ?? null,
    timeout_s: valid.timeout_s ?? null,
    container_id: null,
    created_at: now,
    updated_at: now,
  });
  em.create(JobEventEntity, { job_id: row.id, at: now, from_status: null, to_status: 'pending', reason: 'submitted' });
  return row;
}

/**
 * Applies `change` to a loaded row and stages its event; throws conflict, touching nothing,
 * for a transition the job model forbids.
 */
function applyChange(em: EntityManager, row: JobRow, change: JobChange, now: Date): void {
  const from = row.status;
  const to = change.status ?? from;
  if (!NEXT[from].includes(to)) {
    const why = isTerminal(from) ? `has already ${from}` : `is ${from} and cannot become ${to}`;
    throw new DmsError('conflict', `job ${row.id} ${why}`);
  }
  if (change.node !== undefined) row.node = change.node;
  if (change.exit_code !== undefined) row.exit_code = change.exit_code;
  if (change.container_id !== undefined) row.container_id = change.container_id;
  if (change.pending_reason !== undefined) row.pending_reason = change.pending_reason;
  if (change.error !== undefined) row.error = change.error;
  // A reason only describes a wait; once the job left pending it would mislead.
  if (to !== 'pending') row.pending_reason = null;
  if (to === 'failed') row.error ??= change.reason;
  row.status = to;
  row.updated_at = now;
  em.create(JobEventEntity, { job_id: row.id, at: now, from_status: from, to_status: to, reason: change.reason });
}

export class JobEventRepository {
  constructor(private readonly orm: MikroORM) {}

  /** A job's history, oldest first; empty for an unknown id. */
  async listFor(jobId: string): Promise<JobEvent[]> {
    const rows = await this.orm.em.fork().find(JobEventEntity, { job_id: jobId }, { orderBy: { id: 'asc' } });
    return rows.map(toEvent);
  }
}

function where(filter: JobFilter) {
  return {
    ...(filter.status === undefined ? {} : { status: Array.isArray(filter.status) ? { $in: filter.status } : filter.status }),
    ...(filter.executor === undefined ? {} : { executor: filter.executor }),
  };
}

function toJob(row: JobRow): Job {
  return {
    id: row.id,
    name: row.name,
    image: row.image,
    command: row.command,
    environment: row.environment,
    resources: row.resources,
    executor: row.executor,
    status: row.status,
    node: row.node ?? null,
    exit_code: row.exit_code ?? null,
    error: row.error ?? null,
    pending_reason: row.pending_reason ?? null,
    timeout_s: row.timeout_s ?? null,
    container_id: row.container_id ?? null,
    created_at: row.created_at.toISOString(),
    updated_at: row.updated_at.toISOString(),
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
