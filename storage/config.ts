import type { MigrationObject } from '@mikro-orm/core';
import { Migrator } from '@mikro-orm/migrations';
import type { Options } from '@mikro-orm/sqlite';
import { MIGRATIONS } from './migrations/index.js';
import { baseOptions } from './options.js';

/**
 * ORM options for the SQLite file at `path`, with the migrator. `migrations` is a parameter only
 * so a test can build a database as an older release would have; the node always uses the full list.
 */
export function storageConfig(path: string, migrations: MigrationObject[] = MIGRATIONS): Options {
  return {
    ...baseOptions(path),
    extensions: [Migrator],
    migrations: {
      migrationsList: migrations,
      transactional: true,
      allOrNothing: true,
      // Snapshots are for generating migrations from entity diffs; ours are written by hand.
      snapshot: false,
      silent: true,
    },
  };
}
