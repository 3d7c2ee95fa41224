import { Migration } from '@mikro-orm/migrations';

/** Jobs gain the files they leave and take (README "Job outputs"), and the signed manifest of what they left. Existing jobs have none. */
export class JobFiles extends Migration {
  override up(): void {
    this.addSql("alter table `job` add column `outputs` json not null default '[]';");
    this.addSql("alter table `job` add column `inputs` json not null default '[]';");
    this.addSql('alter table `job` add column `manifest` text null;');
  }

  override down(): void {
    this.addSql('alter table `job` drop column `manifest`;');
    this.addSql('alter table `job` drop column `inputs`;');
    this.addSql('alter table `job` drop column `outputs`;');
  }
}
