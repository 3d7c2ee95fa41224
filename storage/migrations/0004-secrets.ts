import { Migration } from '@mikro-orm/migrations';

/** Jobs gain secrets: environment variables sent only to providers the requester trusts. Existing jobs have none. */
export class Secrets extends Migration {
  override up(): void {
    this.addSql("alter table `job` add column `secrets` json not null default '{}';");
  }

  override down(): void {
    this.addSql('alter table `job` drop column `secrets`;');
  }
}
