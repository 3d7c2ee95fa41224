/** /api/v1/resources/usage and /api/v1/allocations: envelopes to the resource manager's behaviors. */
import { AllocationRequestSchema, parseWith } from '../../behaviors/jobs/schema.js';
import { DeallocatePayload, ResourceBehaviors, RESOURCES_INBOX } from '../../behaviors/jobs/resources.js';
import { invalid } from '../../runtime/errors.js';
import { JsonBody } from '../errors.js';
import { route } from '../handler.js';
import { param, readJson } from './behavior-call.js';
import type { RouteModule } from './types.js';

export const resourceRoutes: RouteModule = ({ app, config, http, log }) => {
  const call = (be: string, payload: unknown) => http.call(RESOURCES_INBOX, be, payload);

  app.get(
    '/api/v1/resources/usage',
    route(log, () => call(ResourceBehaviors.usage, {})),
  );

  app.post(
    '/api/v1/allocations',
    route(log, async (event) => {
      const request = parseWith(AllocationRequestSchema, await readJson(event, config.rest.body_limit, 'allocation'), 'allocation');
      return new JsonBody(JSON.stringify(await call(ResourceBehaviors.allocate, request)), 201);
    }),
  );

  // Held allocations; ?all=true adds released ones.
  app.get(
    '/api/v1/allocations',
    route(log, (event) => {
      const all = event.url.searchParams.get('all');
      if (all !== null && all !== 'true' && all !== 'false') throw invalid(`all: '${all}' is not true or false`);
      return call(ResourceBehaviors.allocations, { all: all === 'true' });
    }),
  );

  app.delete(
    '/api/v1/allocations/:id',
    // Checked as the behavior checks it: a bad id is a 400, not a refusal from the kernel.
    route(log, (event) => call(ResourceBehaviors.deallocate, { id: parseWith(DeallocatePayload.shape.id, param(event, 'id'), 'allocation id') })),
  );
};
