import { Migration } from '@mikro-orm/migrations';

/** Jobs gain the TCP ports their requester may forward to through a tunnel. Existing jobs declare none. */
export class Ports extends Migration {
  override up(): void {
    this.addSql("alter table `job` add column `ports` json not null default '[]';");
  }

  override down(): void {
    this.addSql('alter table `job` drop column `ports`;');
  }
}
