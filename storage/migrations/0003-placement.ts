import { Migration } from '@mikro-orm/migrations';

/**
 * Jobs that leave the node they were submitted on: where they may run, who asked, and each
 * placement they used; devices gain labels a placement can ask for. Existing jobs were all
 * local: no placement, no requester recorded, no attempts.
 */
export class Placement extends Migration {
  override up(): void {
    this.addSql('alter table `job` add column `placement` json null;');
    this.addSql('alter table `job` add column `requester` text null;');
    this.addSql("alter table `job` add column `attempts` json not null default '[]';");
    this.addSql("alter table `device_setting` add column `labels` json not null default '{}';");
  }

  override down(): void {
    this.addSql('alter table `device_setting` drop column `labels`;');
    this.addSql('alter table `job` drop column `attempts`;');
    this.addSql('alter table `job` drop column `requester`;');
    this.addSql('alter table `job` drop column `placement`;');
  }
}
