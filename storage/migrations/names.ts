/**
 * The names of every migration (./index.ts), oldest first, without their classes: enough to
 * see whether a database is up to date without loading the migrator (storage/index.ts).
 * ./index.ts checks that the two lists agree.
 */
export const MIGRATION_NAMES = ['0001-initial', '0002-query-indexes', '0003-placement', '0004-secrets', '0005-job-files', '0006-ports', '0007-ensembles', '0008-waiting-cancels'] as const;

/** The table MikroORM's migrator records applied migrations in (its default name). */
export const MIGRATIONS_TABLE = 'mikro_orm_migrations';
