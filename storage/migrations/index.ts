import type { MigrationObject } from '@mikro-orm/core';
import { InitialSchema } from './0001-initial.js';
import { QueryIndexes } from './0002-query-indexes.js';
import { Placement } from './0003-placement.js';
import { Secrets } from './0004-secrets.js';
import { JobFiles } from './0005-job-files.js';
import { Ports } from './0006-ports.js';
import { Ensembles } from './0007-ensembles.js';
import { WaitingCancels } from './0008-waiting-cancels.js';
import { MIGRATION_NAMES } from './names.js';

/**
 * Every migration, oldest first. Listed explicitly instead of found by a glob so the same
 * list works from the TypeScript sources and from dist/. A name is recorded in the database
 * once applied: never rename or reorder, only append.
 */
export const MIGRATIONS: MigrationObject[] = [
  { name: '0001-initial', class: InitialSchema },
  { name: '0002-query-indexes', class: QueryIndexes },
  { name: '0003-placement', class: Placement },
  { name: '0004-secrets', class: Secrets },
  { name: '0005-job-files', class: JobFiles },
  { name: '0006-ports', class: Ports },
  { name: '0007-ensembles', class: Ensembles },
  { name: '0008-waiting-cancels', class: WaitingCancels },
];

if (MIGRATIONS.map((m) => m.name).join() !== MIGRATION_NAMES.join()) {
  throw new Error('storage/migrations/names.ts does not list the migrations of storage/migrations/index.ts');
}
