import type { MikroORM } from '@mikro-orm/sqlite';
import { DeviceSettingsPatchSchema, DeviceSettingsSchema, type DeviceSettings, type DeviceSettingsPatch, publishedSettingsProblem } from '../behaviors/jobs/schema.js';
import { invalid } from '../runtime/errors.js';
import { parseWith } from '../runtime/issues.js';
import { jsonColumn, withConnection } from './connection.js';
import { DeviceSettingEntity } from './entities.js';

const ROW_ID = 1;
const DEFAULTS: DeviceSettings = { name: '', location: {}, labels: {}, onboarded: null };

export class DeviceRepository {
  constructor(private readonly orm: MikroORM) {}

  /** The stored settings, or null before the operator has set any. */
  async get(): Promise<DeviceSettings | null> {
    const row = await this.orm.em.fork().findOne(DeviceSettingEntity, { id: ROW_ID });
    return row ? settingsOf(row) : null;
  }

  /** Merges `patch` over the stored settings (top-level fields replace) and returns the result. */
  async put(patch: DeviceSettingsPatch): Promise<DeviceSettings> {
    const changes = parseWith(DeviceSettingsPatchSchema, patch, 'device settings');
    return withConnection(this.orm, async (conn) => {
      const [row] = await conn.all('select * from `device_setting` where `id` = ?', [ROW_ID]);
      const current: DeviceSettings = row
        ? settingsOf({ name: String(row.name), location: jsonColumn(row.location), labels: jsonColumn(row.labels), onboarded: jsonColumn(row.onboarded) })
        : DEFAULTS;
      const next = parseWith(DeviceSettingsSchema, { ...current, ...changes }, 'device settings');
      const problem = publishedSettingsProblem(next);
      if (problem) throw invalid(`invalid device settings: ${problem}`);
      const values = [ROW_ID, next.name, JSON.stringify(next.location), JSON.stringify(next.labels), next.onboarded === null ? null : JSON.stringify(next.onboarded)];
      await conn.commit([conn.format(UPSERT, values)]);
      return next;
    });
  }
}

const UPSERT =
  'insert into `device_setting` (`id`, `name`, `location`, `labels`, `onboarded`) values (?, ?, ?, ?, ?) ' +
  'on conflict (`id`) do update set `name` = excluded.`name`, `location` = excluded.`location`, `labels` = excluded.`labels`, `onboarded` = excluded.`onboarded`';

function settingsOf(row: { name: string; location: DeviceSettings['location']; labels?: DeviceSettings['labels'] | null; onboarded?: DeviceSettings['onboarded'] | null }): DeviceSettings {
  return { name: row.name, location: row.location, labels: row.labels ?? {}, onboarded: row.onboarded ?? null };
}
