/**
 * The node's database: one SQLite file, brought up to the current schema on open. Every
 * write resolves only after its transaction committed, so whatever a caller was answered
 * survives a crash.
 */
import { chmodSync, closeSync, existsSync, openSync, statSync } from 'node:fs';
import { dirname } from 'node:path';
import type { MikroORM } from '@mikro-orm/sqlite';
import { AllocationRepository } from './allocations.js';
import { WaitingCancelRepository } from './cancels.js';
import { MIGRATION_NAMES, MIGRATIONS_TABLE } from './migrations/names.js';
import { baseOptions } from './options.js';
import { initOrm } from './orm-environment.js';
import { checkSqliteDriver } from './driver.js';
import { DeviceRepository } from './device.js';
import { EnsembleRepository } from './ensembles.js';
import { JobEventRepository, JobRepository } from './jobs.js';
import { makeDirs } from '../runtime/files.js';

export type { AllocationFilter } from './allocations.js';
export type { JobChange, JobCreateOptions, JobFilter, JobListOptions, JobWrite, JobWriteResult } from './jobs.js';
export type { EnsembleChange, EnsembleRow } from './ensembles.js';
export type { StoredCancel, WaitingCancel } from './cancels.js';
export { AllocationRepository, DeviceRepository, EnsembleRepository, JobEventRepository, JobRepository, WaitingCancelRepository };

export interface Storage {
  readonly jobs: JobRepository;
  readonly events: JobEventRepository;
  readonly allocations: AllocationRepository;
  readonly device: DeviceRepository;
  readonly ensembles: EnsembleRepository;
  readonly cancels: WaitingCancelRepository;
  close(): Promise<void>;
}

/** Owner-only: the database holds job environments, which carry secrets. */
const DB_FILE_MODE = 0o600;

/**
 * Opens (creating if needed) the database at `path` and applies pending migrations. The file
 * and its -wal and -shm companions are readable by the node's user only.
 */
export async function openStorage(path: string): Promise<Storage> {
  checkSqliteDriver();
  const onDisk = path !== ':memory:' && !path.startsWith('file:');
  // A database with nothing in it yet needs every migration: opened with the migrator at once.
  const empty = !onDisk || !existsSync(path) || statSync(path).size === 0;
  // Created here with the mode, before SQLite opens it: SQLite gives the -wal and -shm files
  // it creates the database file's mode, so no moment exists where any of them is world-readable.
  if (onDisk) {
    makeDirs(dirname(path));
    closeSync(openSync(path, 'a', DB_FILE_MODE));
  }
  let orm = await initOrm(empty ? await migratorOptions(path) : baseOptions(path));
  try {
    if (empty) await orm.getMigrator().up();
    else if (await needsMigrating(orm)) {
      // Opened again with the migrator, loaded only now (./options.ts says why).
      await orm.close(true);
      orm = await initOrm(await migratorOptions(path));
      await orm.getMigrator().up();
    }
    // Files made by an older release (with the umask's mode) are tightened too.
    if (onDisk) for (const file of [path, `${path}-wal`, `${path}-shm`]) chmodIfPresent(file);
  } catch (e) {
    await orm.close(true);
    throw e;
  }
  return {
    jobs: new JobRepository(orm),
    events: new JobEventRepository(orm),
    allocations: new AllocationRepository(orm),
    device: new DeviceRepository(orm),
    ensembles: new EnsembleRepository(orm),
    cancels: new WaitingCancelRepository(orm),
    close: () => orm.close(true),
  };
}

async function migratorOptions(path: string) {
  const { storageConfig } = await import('./config.js');
  return storageConfig(path);
}

/** Whether a migration of this release is not recorded as applied (a new database has no table of them). */
async function needsMigrating(orm: MikroORM): Promise<boolean> {
  let applied: Set<string>;
  try {
    const rows = await orm.em.getConnection().execute<{ name: string }[]>(`select name from \`${MIGRATIONS_TABLE}\``);
    applied = new Set(rows.map((r) => r.name));
  } catch {
    return true;
  }
  return MIGRATION_NAMES.some((name) => !applied.has(name));
}

function chmodIfPresent(file: string): void {
  try {
    chmodSync(file, DB_FILE_MODE);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== 'ENOENT') throw e;
  }
}
