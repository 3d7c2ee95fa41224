/** /api/v1/device: this device's status and the operator's settings for it (name, location, onboarded share). */
import { DeviceSettingsPatchSchema, parseWith } from '../../behaviors/jobs/schema.js';
import { DeviceBehaviors, RESOURCES_INBOX } from '../../behaviors/jobs/resources.js';
import { route } from '../handler.js';
import { readJson } from './behavior-call.js';
import type { RouteModule } from './types.js';

export const deviceRoutes: RouteModule = ({ app, config, http, log }) => {
  const call = (be: string, payload: unknown) => http.call(RESOURCES_INBOX, be, payload);

  app.get(
    '/api/v1/device/status',
    route(log, () => call(DeviceBehaviors.status, {})),
  );

  app.put(
    '/api/v1/device/config',
    route(log, async (event) => {
      const patch = parseWith(DeviceSettingsPatchSchema, await readJson(event, config.rest.body_limit, 'device settings'), 'device settings');
      return call(DeviceBehaviors.configure, patch);
    }),
  );
};
