/** /api/v1/device: this device's status and the operator's settings for it (name, location, onboarded share). */
import { DeviceSettingsPatchSchema, DeviceSettingsSchema } from '../../behaviors/jobs/schema.js';
import { DeviceBehaviors, DeviceSchema, RESOURCES_INBOX } from '../../behaviors/jobs/resources.js';
import { RESOURCE_MANAGER_ANSWERS } from './resources.js';
import type { RouteModule } from './types.js';

export const deviceRoutes: RouteModule = ({ table, http }) => {
  const call = (be: string, payload: unknown) => http.call(RESOURCES_INBOX, be, payload);

  table.add({
    method: 'GET',
    path: '/api/v1/device/status',
    operationId: 'getDeviceStatus',
    summary: 'This device: its DID, name, status, onboarded share, location and when it was last seen',
    tags: ['device'],
    responses: { ...RESOURCE_MANAGER_ANSWERS, 200: { description: 'the Device; status is busy while jobs run', schema: DeviceSchema } },
    handler: () => call(DeviceBehaviors.status, {}),
  });

  table.add({
    method: 'PUT',
    path: '/api/v1/device/config',
    operationId: 'configureDevice',
    summary: "Change the operator's settings for this device",
    description: 'The body is merged into the settings: fields left out keep their values.',
    tags: ['device'],
    body: { schema: DeviceSettingsPatchSchema, what: 'device settings' },
    responses: {
      ...RESOURCE_MANAGER_ANSWERS,
      200: { description: 'the settings after merging the body', schema: DeviceSettingsSchema },
      400: { description: 'naming every bad field, or a share larger than the machine' },
    },
    handler: async (_event, input) => call(DeviceBehaviors.configure, await input.body()),
  });
};
