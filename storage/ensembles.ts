/**
 * Ensembles as stored: the spec as submitted, where the ensemble stands, and how often it and
 * its parts were placed or started again. Its parts are jobs (./jobs.ts) with its id in their
 * `ensemble` column; the actor joins the two.
 */
import type { InferEntity } from '@mikro-orm/core';
import type { MikroORM } from '@mikro-orm/sqlite';
import type { EnsembleSpec, EnsembleStatus } from '../behaviors/ensembles/schema.js';
import { notFound } from '../runtime/errors.js';
import { EnsembleEntity } from './entities.js';

export type EnsembleRow = InferEntity<typeof EnsembleEntity>;

export interface EnsembleChange {
  status?: EnsembleStatus;
  reason?: string | null;
  attempts?: number;
  restarts?: Record<string, number>;
}

export class EnsembleRepository {
  constructor(private readonly orm: MikroORM) {}

  async create(id: string, spec: EnsembleSpec): Promise<EnsembleRow> {
    const em = this.orm.em.fork();
    const now = new Date();
    const row = em.create(EnsembleEntity, { id, name: spec.name, spec, status: 'pending', reason: null, attempts: 0, restarts: {}, created_at: now, updated_at: now });
    await em.flush();
    return row;
  }

  async get(id: string): Promise<EnsembleRow | null> {
    return this.orm.em.fork().findOne(EnsembleEntity, { id });
  }

  /** Newest first. */
  async list(opts: { limit: number; offset: number; status?: EnsembleStatus[] }): Promise<EnsembleRow[]> {
    return this.orm.em
      .fork()
      .find(EnsembleEntity, opts.status ? { status: { $in: opts.status } } : {}, { orderBy: { created_at: 'desc', id: 'desc' }, limit: opts.limit, offset: opts.offset });
  }

  /** Ensembles not yet ended: what the actor picks up again after a restart. */
  async live(): Promise<EnsembleRow[]> {
    return this.orm.em.fork().find(EnsembleEntity, { status: { $in: ['pending', 'running'] } }, { orderBy: { created_at: 'asc' } });
  }

  async update(id: string, change: EnsembleChange): Promise<EnsembleRow> {
    return this.orm.em.fork().transactional(async (em) => {
      const row = await em.findOne(EnsembleEntity, { id });
      if (!row) throw notFound(`ensemble ${id} not found`);
      if (change.status !== undefined) row.status = change.status;
      if (change.reason !== undefined) row.reason = change.reason;
      if (change.attempts !== undefined) row.attempts = change.attempts;
      if (change.restarts !== undefined) row.restarts = change.restarts;
      row.updated_at = new Date();
      return row;
    });
  }
}
