/**
 * Ensembles as stored: the spec as submitted, where the ensemble stands, and how often it and
 * its parts were placed or started again. Its parts are jobs (./jobs.ts) with its id in their
 * `ensemble` column; the actor joins the two.
 */
import type { InferEntity } from '@mikro-orm/core';
import type { MikroORM } from '@mikro-orm/sqlite';
import type { EnsembleSpec, EnsembleStatus } from '../behaviors/ensembles/schema.js';
import { notFound } from '../runtime/errors.js';
import { dateColumn, jsonColumn, textColumn, withConnection } from './connection.js';
import { EnsembleEntity } from './entities.js';
import { readBoundedPage } from './pages.js';

export type EnsembleRow = InferEntity<typeof EnsembleEntity>;

export interface EnsembleChange {
  status?: EnsembleStatus;
  reason?: string | null;
  attempts?: number;
  restarts?: Record<string, number>;
}

/** Rows read at a time while a list bounded in bytes fills: eight of the largest specs are about the bound itself. */
const LIST_SLICE = 8;

const whereStatus = (status?: EnsembleStatus[]) => (status ? { status: { $in: status } } : {});

export class EnsembleRepository {
  constructor(private readonly orm: MikroORM) {}

  async create(id: string, spec: EnsembleSpec): Promise<EnsembleRow> {
    const now = new Date();
    const row: EnsembleRow = { id, name: spec.name, spec, status: 'pending', reason: null, attempts: 0, restarts: {}, created_at: now, updated_at: now };
    await withConnection(this.orm, (conn) => conn.commit([conn.format(INSERT, valuesOf(row))]));
    return row;
  }

  async get(id: string): Promise<EnsembleRow | null> {
    return this.orm.em.fork().findOne(EnsembleEntity, { id });
  }

  /**
   * Newest first: at most `limit`, and with `maxBytes` no more of them than that of specs as
   * JSON (always one at least). A spec may be as large as a request body (1 MiB by default),
   * so a page of 100 was a 100 MB reply, as the jobs list was (storage/jobs.ts); read in slices,
   * such a page stops where the bytes do.
   */
  async list(opts: { limit: number; offset: number; status?: EnsembleStatus[]; maxBytes?: number }): Promise<EnsembleRow[]> {
    const em = this.orm.em.fork();
    const where = whereStatus(opts.status);
    const orderBy = { created_at: 'desc', id: 'desc' } as const;
    if (opts.maxBytes === undefined) return em.find(EnsembleEntity, where, { orderBy, limit: opts.limit, offset: opts.offset });
    const read = async (offset: number, limit: number) => {
      const rows = await em.find(EnsembleEntity, where, { orderBy, limit, offset });
      em.clear();
      return rows;
    };
    return readBoundedPage({ offset: opts.offset, limit: opts.limit, maxBytes: opts.maxBytes, slice: LIST_SLICE }, read, (row) => JSON.stringify(row.spec).length);
  }

  /** How many ensembles a list of every page holds. */
  async count(status?: EnsembleStatus[]): Promise<number> {
    return this.orm.em.fork().count(EnsembleEntity, whereStatus(status));
  }

  /** Ensembles not yet ended: what the actor picks up again after a restart. */
  async live(): Promise<EnsembleRow[]> {
    return this.orm.em.fork().find(EnsembleEntity, { status: { $in: ['pending', 'running'] } }, { orderBy: { created_at: 'asc' } });
  }

  async update(id: string, change: EnsembleChange): Promise<EnsembleRow> {
    return withConnection(this.orm, async (conn) => {
      const [stored] = await conn.all('select * from `ensemble` where `id` = ?', [id]);
      if (!stored) throw notFound(`ensemble ${id} not found`);
      const row = rowOf(stored);
      if (change.status !== undefined) row.status = change.status;
      if (change.reason !== undefined) row.reason = change.reason;
      if (change.attempts !== undefined) row.attempts = change.attempts;
      if (change.restarts !== undefined) row.restarts = change.restarts;
      row.updated_at = new Date();
      const values = [row.status, row.reason ?? null, row.attempts, JSON.stringify(row.restarts), row.updated_at.getTime(), row.id];
      await conn.commit([conn.format('update `ensemble` set `status` = ?, `reason` = ?, `attempts` = ?, `restarts` = ?, `updated_at` = ? where `id` = ?', values)]);
      return row;
    });
  }
}

const COLUMNS = ['id', 'name', 'spec', 'status', 'reason', 'attempts', 'restarts', 'created_at', 'updated_at'] as const;
const INSERT = `insert into \`ensemble\` (${COLUMNS.map((c) => `\`${c}\``).join(', ')}) values (${COLUMNS.map(() => '?').join(', ')})`;

const valuesOf = (row: EnsembleRow): unknown[] => [
  row.id,
  row.name,
  JSON.stringify(row.spec),
  row.status,
  row.reason ?? null,
  row.attempts,
  JSON.stringify(row.restarts),
  row.created_at.getTime(),
  row.updated_at.getTime(),
];

function rowOf(r: Record<string, unknown>): EnsembleRow {
  return {
    id: String(r.id),
    name: String(r.name),
    spec: jsonColumn(r.spec),
    status: String(r.status) as EnsembleStatus,
    reason: textColumn(r.reason),
    attempts: Number(r.attempts),
    restarts: jsonColumn(r.restarts) ?? {},
    created_at: dateColumn(r.created_at),
    updated_at: dateColumn(r.updated_at),
  };
}
