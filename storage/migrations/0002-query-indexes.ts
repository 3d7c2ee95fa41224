import { Migration } from '@mikro-orm/migrations';

/**
 * Indexes for the queries the node runs on every restart and every listing: jobs by status
 * in submission order, a job's events, a job's allocations. Shipped after the initial schema,
 * so it also proves that an existing database upgrades in place.
 */
export class QueryIndexes extends Migration {
  override up(): void {
    this.addSql('create index `job_status_created_at_index` on `job` (`status`, `created_at`);');
    this.addSql('create index `job_event_job_id_index` on `job_event` (`job_id`);');
    this.addSql('create index `allocation_job_id_index` on `allocation` (`job_id`);');
  }

  override down(): void {
    this.addSql('drop index `allocation_job_id_index`;');
    this.addSql('drop index `job_event_job_id_index`;');
    this.addSql('drop index `job_status_created_at_index`;');
  }
}
