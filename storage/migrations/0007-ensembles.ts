import { Migration } from '@mikro-orm/migrations';

/**
 * Ensembles (README "Ensembles"): their own table, and jobs gain the ensemble and part they
 * belong to. Existing jobs belong to none.
 */
export class Ensembles extends Migration {
  override up(): void {
    this.addSql('alter table `job` add column `ensemble` text null;');
    this.addSql('alter table `job` add column `part` text null;');
    this.addSql('create index `job_ensemble_index` on `job` (`ensemble`);');
    this.addSql(
      'create table `ensemble` (`id` text not null primary key, `name` text not null, `spec` json not null, `status` text not null, `reason` text null, ' +
        "`attempts` integer not null default 0, `restarts` json not null default '{}', `created_at` datetime not null, `updated_at` datetime not null);",
    );
    this.addSql('create index `ensemble_created_at_index` on `ensemble` (`created_at`);');
  }

  override down(): void {
    this.addSql('drop table `ensemble`;');
    this.addSql('drop index `job_ensemble_index`;');
    this.addSql('alter table `job` drop column `part`;');
    this.addSql('alter table `job` drop column `ensemble`;');
  }
}
