import { randomUUID } from 'node:crypto';
import type { InferEntity } from '@mikro-orm/core';
import type { MikroORM } from '@mikro-orm/sqlite';
import { AllocationRequestSchema, type Allocation, type AllocationRequest } from '../behaviors/jobs/schema.js';
import { parseWith } from '../runtime/issues.js';
import { notFound } from '../runtime/errors.js';
import { AllocationEntity } from './entities.js';

type AllocationRow = InferEntity<typeof AllocationEntity>;

export interface AllocationFilter {
  /** true: only held allocations; false: only released ones; absent: both. */
  active?: boolean;
  job_id?: string;
}

/**
 * Resources reserved on this node. Storage only records them: deciding whether a request
 * fits the capacity is the resource manager's job, which serialises requests in its mailbox.
 */
export class AllocationRepository {
  constructor(private readonly orm: MikroORM) {}

  async create(request: AllocationRequest): Promise<Allocation> {
    const valid = parseWith(AllocationRequestSchema, request, 'allocation');
    const em = this.orm.em.fork();
    const row = em.create(AllocationEntity, {
      id: randomUUID(),
      resources: valid.resources,
      job_id: valid.job_id ?? null,
      created_at: new Date(),
      released_at: null,
    });
    await em.flush();
    return toAllocation(row);
  }

  async get(id: string): Promise<Allocation | null> {
    const row = await this.orm.em.fork().findOne(AllocationEntity, { id });
    return row ? toAllocation(row) : null;
  }

  /** Oldest first. */
  async list(filter: AllocationFilter = {}): Promise<Allocation[]> {
    const rows = await this.orm.em.fork().find(
      AllocationEntity,
      {
        ...(filter.active === undefined ? {} : { released_at: filter.active ? null : { $ne: null } }),
        ...(filter.job_id === undefined ? {} : { job_id: filter.job_id }),
      },
      { orderBy: { created_at: 'asc', id: 'asc' } },
    );
    return rows.map(toAllocation);
  }

  /** Releases an allocation. Releasing twice keeps the first release time, so retries are safe. */
  async release(id: string): Promise<Allocation> {
    const row = await this.orm.em.fork().transactional(async (em) => {
      const row = await em.findOne(AllocationEntity, { id });
      if (!row) throw notFound(`allocation ${id} not found`);
      row.released_at ??= new Date();
      return row;
    });
    return toAllocation(row);
  }

  /** Releases everything a job still holds (when it ends); returns what was released. */
  async releaseForJob(jobId: string): Promise<Allocation[]> {
    const rows = await this.orm.em.fork().transactional(async (em) => {
      const rows = await em.find(AllocationEntity, { job_id: jobId, released_at: null });
      const now = new Date();
      for (const row of rows) row.released_at = now;
      return rows;
    });
    return rows.map(toAllocation);
  }
}

function toAllocation(row: AllocationRow): Allocation {
  return {
    id: row.id,
    resources: row.resources,
    job_id: row.job_id ?? null,
    created_at: row.created_at.toISOString(),
    released_at: row.released_at ? row.released_at.toISOString() : null,
  };
}
