import * as z from 'zod';
import { ConfigSchema, redact } from '../../runtime/config.js';
import { DmsError } from '../../runtime/errors.js';
import type { RouteModule } from './types.js';

const Health = z.object({ status: z.literal('ok') });

const CONFIG_HIDDEN = 'allowed in debug mode';
const ConfigAnswer = z.object({
  config: z.union([ConfigSchema.meta({ description: 'the effective configuration, secrets redacted (debug mode)' }), z.literal(CONFIG_HIDDEN)]),
});

/** Health and configuration, each at its old path and under /api/v1; the Prometheus metrics. */
export const systemRoutes: RouteModule = ({ table, config, system }) => {
  table.add({
    method: 'GET',
    path: '/metrics',
    operationId: 'getMetrics',
    summary: 'Prometheus metrics',
    description:
      'Envelopes by behavior and outcome, invoke latency, mailbox depth, peers, jobs by status, run durations, placements, and the process (dms_process_*, dms_nodejs_*). A GET like the others: with REST auth on, any role may read it.',
    tags: ['system'],
    responses: {
      200: { description: 'the metrics', content: { 'text/plain': { description: 'the Prometheus text exposition format, version 0.0.4' } } },
      404: { description: 'a node built without metrics (tests)' },
    },
    handler: async () => {
      const metrics = system.metrics;
      if (!metrics) throw new DmsError('not_found', 'no metrics on this node');
      return new Response(await metrics.text(), { headers: { 'content-type': metrics.contentType } });
    },
  });

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
