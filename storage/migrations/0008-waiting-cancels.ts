import { Migration } from '@mikro-orm/migrations';

/**
 * Cancels a provider has not confirmed (actors/executors/cancel-outbox.ts) are stored, where they
 * were kept in memory only and a restart of the requester forgot them. An older home has none waiting.
 */
export class WaitingCancels extends Migration {
  override up(): void {
    this.addSql('create table `waiting_cancel` (`job_id` text not null primary key, `node` text not null, `reason` text not null, `since` datetime not null);');
  }

  override down(): void {
    this.addSql('drop table `waiting_cancel`;');
  }
}
