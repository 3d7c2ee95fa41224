import { Migration } from '@mikro-orm/migrations';

/** The first schema. Never edit a migration that has shipped: add a new one instead. */
export class InitialSchema extends Migration {
  override up(): void {
    this.addSql(
      "create table `job` (`id` text not null, `name` text not null, `image` text not null, " +
        '`command` json not null, `environment` json not null, `resources` json not null, ' +
        "`executor` text not null default 'docker', `status` text not null, `node` text null, " +
        '`exit_code` integer null, `error` text null, `pending_reason` text null, ' +
        '`timeout_s` integer null, `container_id` text null, `created_at` datetime not null, ' +
        '`updated_at` datetime not null, primary key (`id`));',
    );
    this.addSql(
      'create table `job_event` (`id` integer not null primary key autoincrement, ' +
        '`job_id` text not null, `at` datetime not null, `from_status` text null, ' +
        '`to_status` text not null, `reason` text not null);',
    );
    this.addSql(
      'create table `allocation` (`id` text not null, `resources` json not null, ' +
        '`job_id` text null, `created_at` datetime not null, `released_at` datetime null, ' +
        'primary key (`id`));',
    );
    this.addSql(
      'create table `device_setting` (`id` integer not null, `name` text not null, ' +
        '`location` json not null, `onboarded` json null, primary key (`id`));',
    );
  }

  override down(): void {
    for (const table of ['device_setting', 'allocation', 'job_event', 'job']) {
      this.addSql(`drop table if exists \`${table}\`;`);
    }
  }
}
