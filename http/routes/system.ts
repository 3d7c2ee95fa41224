import * as z from 'zod';
import { ConfigSchema, redact } from '../../runtime/config.js';
import type { RouteModule } from './types.js';

const Health = z.object({ status: z.literal('ok') });

const CONFIG_HIDDEN = 'allowed in debug mode';
const ConfigAnswer = z.object({
  config: z.union([ConfigSchema.meta({ description: 'the effective configuration, secrets redacted (debug mode)' }), z.literal(CONFIG_HIDDEN)]),
});

/** Health and configuration, each at its old path and under /api/v1. */
export const systemRoutes: RouteModule = ({ table, config }) => {
  for (const [path, operationId] of [
    ['/health', 'getHealth'],
    ['/api/v1/health', 'getApiHealth'],
  ]) {
    table.add({
      method: 'GET',
      path,
      operationId,
      summary: 'Whether the node answers',
      description: 'Needs no credentials; a supervisor that probes by a name other than loopback, `localhost` or rest.addr must list it in rest.allowed_hosts.',
      tags: ['system'],
      responses: { 200: { description: 'the node is up', schema: Health } },
      handler: (): z.output<typeof Health> => ({ status: 'ok' }),
    });
  }

  for (const [path, operationId] of [
    ['/config', 'getConfig'],
    ['/api/v1/config', 'getApiConfig'],
  ]) {
    table.add({
      method: 'GET',
      path,
      operationId,
      summary: 'The effective configuration',
      description: `In debug mode the configuration with secrets redacted; otherwise \`{"config": "${CONFIG_HIDDEN}"}\`.`,
      tags: ['system'],
      responses: { 200: { description: 'the configuration, or that it is shown in debug mode only', schema: ConfigAnswer } },
      handler: (): z.input<typeof ConfigAnswer> => ({ config: config.general.debug ? redact(config) : CONFIG_HIDDEN }),
    });
  }
};
