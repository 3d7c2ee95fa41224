import type { MikroORM } from '@mikro-orm/sqlite';
import { DeviceSettingsPatchSchema, DeviceSettingsSchema, type DeviceSettings, type DeviceSettingsPatch } from '../behaviors/jobs/schema.js';
import { parseWith } from '../runtime/issues.js';
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
    return this.orm.em.fork().transactional(async (em) => {
      const row = await em.findOne(DeviceSettingEntity, { id: ROW_ID });
      const current: DeviceSettings = row ? settingsOf(row) : DEFAULTS;
      const next = parseWith(DeviceSettingsSchema, { ...current, ...changes }, 'device settings');
      if (row) em.assign(row, next);
      else em.create(DeviceSettingEntity, { id: ROW_ID, ...next });
      return next;
    });
  }
}

function settingsOf(row: { name: string; location: DeviceSettings['location']; labels?: DeviceSettings['labels'] | null; onboarded?: DeviceSettings['onboarded'] | null }): DeviceSettings {
  return { name: row.name, location: row.location, labels: row.labels ?? {}, onboarded: row.onboarded ?? null };
}
