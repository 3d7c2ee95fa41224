/**
 * The node's database: one SQLite file, brought up to the current schema on open. Every
 * write resolves only after its transaction committed, so whatever a caller was answered
 * survives a crash.
 */
import { MikroORM } from '@mikro-orm/sqlite';
import { AllocationRepository } from './allocations.js';
import { storageConfig } from './config.js';
import { DeviceRepository } from './device.js';
import { JobEventRepository, JobRepository } from './jobs.js';

export type { AllocationFilter } from './allocations.js';
export type { JobChange, JobCreateOptions, JobFilter, JobListOptions, JobWrite, JobWriteResult } from './jobs.js';
export { AllocationRepository, DeviceRepository, JobEventRepository, JobRepository };

export interface Storage {
  readonly jobs: JobRepository;
  readonly events: JobEventRepository;
  readonly allocations: AllocationRepository;
  readonly device: DeviceRepository;
  close(): Promise<void>;
}

/** Opens (creating if needed) the database at `path` and applies pending migrations. */
export async function openStorage(path: string): Promise<Storage> {
  const orm = await MikroORM.init(storageConfig(path));
  try {
    await orm.getMigrator().up();
  } catch (e) {
    await orm.close(true);
    throw e;
  }
  return {
    jobs: new JobRepository(orm),
    events: new JobEventRepository(orm),
    allocations: new AllocationRepository(orm),
    device: new DeviceRepository(orm),
    close: () => orm.close(true),
  };
}
