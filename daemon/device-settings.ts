/**
 * The operator's device settings written while no node runs (`dms init --onboard …`): the same
 * store, the same schema and the same capacity rule as the resource manager's
 * `/dms/device/config`, so the node that starts later reads exactly what a running one would
 * have kept.
 */
import { shareBeyondCapacity, measureCapacity } from '../actors/resources/capacity.js';
import { type DeviceSettings, type DeviceSettingsPatch, DeviceSettingsPatchSchema } from '../behaviors/jobs/schema.js';
import type { Config } from '../runtime/config.js';
import { invalid } from '../runtime/errors.js';
import { homePaths } from '../runtime/home.js';
import { parseWith } from '../runtime/issues.js';
import { openStorage } from '../storage/index.js';
import { databasePath } from './jobs.js';

/** Merges `patch` over the stored settings; location fields given replace only themselves. */
export async function writeDeviceSettings(home: string, config: Config, patch: DeviceSettingsPatch): Promise<DeviceSettings> {
  const changes = parseWith(DeviceSettingsPatchSchema, patch, 'device settings');
  if (changes.onboarded) {
    const over = shareBeyondCapacity(changes.onboarded, await measureCapacity({ dataDir: homePaths(home).data }));
    if (over) throw invalid(over);
  }
  const storage = await openStorage(databasePath(config, home));
  try {
    const current = await storage.device.get();
    return await storage.device.put({ ...changes, ...(changes.location ? { location: { ...current?.location, ...changes.location } } : {}) });
  } finally {
    await storage.close();
  }
}
