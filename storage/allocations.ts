import { randomUUID } from 'node:crypto';
import type { InferEntity } from '@mikro-orm/core';
import type { MikroORM } from '@mikro-orm/sqlite';
import { AllocationRequestSchema, type Allocation, type AllocationRequest } from '../behaviors/jobs/schema.js';
import { parseWith } from '../runtime/issues.js';
import { notFound } from '../runtime/errors.js';
import { dateColumn, jsonColumn, textColumn, withConnection } from './connection.js';
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
    const row: AllocationRow = { id: randomUUID(), resources: valid.resources, job_id: valid.job_id ?? null, created_at: new Date(), released_at: null };
    await withConnection(this.orm, (conn) =>
      conn.commit([
        conn.format('insert into `allocation` (`id`, `resources`, `job_id`, `created_at`, `released_at`) values (?, ?, ?, ?, null)', [
          row.id,
          JSON.stringify(row.resources),
          row.job_id,
          row.created_at.getTime(),
        ]),
      ]),
    );
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
    const [row] = await this.releaseWhere('`id` = ?', [id], { all: true });
    if (!row) throw notFound(`allocation ${id} not found`);
    return toAllocation(row);
  }

  /** Releases everything a job still holds (when it ends); returns what was released. */
  async releaseForJob(jobId: string): Promise<Allocation[]> {
    return (await this.releaseWhere('`job_id` = ?', [jobId], { all: false })).map(toAllocation);
  }

  /**
   * Marks the held allocations `where` selects released now, and returns them (`all`: the
   * released ones it selects too, as they were), oldest first.
   */
  private releaseWhere(where: string, params: unknown[], opts: { all: boolean }): Promise<AllocationRow[]> {
    return withConnection(this.orm, async (conn) => {
      const held = opts.all ? '' : ' and `released_at` is null';
      const rows = (await conn.all(`select * from \`allocation\` where ${where}${held} order by \`created_at\`, \`id\``, params)).map(rowOf);
      const now = new Date();
      const releasing = rows.filter((r) => r.released_at === null);
      for (const row of releasing) row.released_at = now;
      // The same rows the read found: the connection is held, nothing else writes meanwhile.
      if (releasing.length > 0) await conn.commit([conn.format(`update \`allocation\` set \`released_at\` = ? where ${where} and \`released_at\` is null`, [now.getTime(), ...params])]);
      return rows;
    });
  }
}

function rowOf(r: Record<string, unknown>): AllocationRow {
  return {
    id: String(r.id),
    resources: jsonColumn(r.resources),
    job_id: textColumn(r.job_id),
    created_at: dateColumn(r.created_at),
    released_at: r.released_at === null || r.released_at === undefined ? null : dateColumn(r.released_at),
  };
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
