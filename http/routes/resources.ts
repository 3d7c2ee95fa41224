/** /api/v1/resources/usage and /api/v1/allocations: envelopes to the resource manager's behaviors. */
import * as z from 'zod';
import { AllocationRequestSchema, AllocationSchema } from '../../behaviors/jobs/schema.js';
import { DeallocatePayload, ResourceBehaviors, RESOURCES_INBOX, UsageReply } from '../../behaviors/jobs/resources.js';
import { JsonBody } from '../errors.js';
import { booleanParam } from '../query.js';
import type { ResponseDoc } from '../route-table.js';
import type { RouteModule } from './types.js';

/** `?all=true` (or 1) adds released allocations. */
export const AllocationListQuery = z.object({
  all: booleanParam('true: released allocations too'),
});

/** Routes that are envelopes to the resource manager: what its mailbox may answer. */
export const RESOURCE_MANAGER_ANSWERS: Record<number, ResponseDoc> = {
  503: { description: "a bounded queue is full (the resource manager's mailbox, rest.max_pending)" },
};

export const resourceRoutes: RouteModule = ({ table, http }) => {
  const call = (be: string, payload: unknown) => http.call(RESOURCES_INBOX, be, payload);

  table.add({
    method: 'GET',
    path: '/api/v1/resources/usage',
    operationId: 'getResourceUsage',
    summary: "This device's capacity, onboarded share, what is allocated and what is free",
    tags: ['resources'],
    responses: { ...RESOURCE_MANAGER_ANSWERS, 200: { description: 'each a ResourceSpec', schema: UsageReply } },
    handler: () => call(ResourceBehaviors.usage, {}),
  });

  table.add({
    method: 'POST',
    path: '/api/v1/allocations',
    operationId: 'createAllocation',
    summary: 'Reserve resources',
    tags: ['resources'],
    body: { schema: AllocationRequestSchema, what: 'allocation' },
    responses: {
      ...RESOURCE_MANAGER_ANSWERS,
      201: { description: 'the Allocation', schema: AllocationSchema },
      400: { description: 'naming every bad field of the request' },
      409: { description: 'naming the resource that is short' },
    },
    handler: async (_event, input) => new JsonBody(JSON.stringify(await call(ResourceBehaviors.allocate, await input.body())), 201),
  });

  table.add({
    method: 'GET',
    path: '/api/v1/allocations',
    operationId: 'listAllocations',
    summary: 'Held allocations (with all=true, released ones too)',
    tags: ['resources'],
    query: AllocationListQuery,
    responses: { ...RESOURCE_MANAGER_ANSWERS, 200: { description: 'the allocations', schema: z.array(AllocationSchema) } },
    handler: (_event, input) => call(ResourceBehaviors.allocations, { all: input.query().all ?? false }),
  });

  table.add({
    method: 'DELETE',
    path: '/api/v1/allocations/:id',
    operationId: 'releaseAllocation',
    summary: 'Release an allocation',
    tags: ['resources'],
    // Checked as the behavior checks it: a bad id is a 400, not a refusal from the kernel.
    params: { id: { schema: DeallocatePayload.shape.id, what: 'allocation id' } },
    responses: {
      ...RESOURCE_MANAGER_ANSWERS,
      200: { description: 'the released Allocation', schema: AllocationSchema },
      400: { description: 'a malformed allocation id' },
      404: { description: 'no allocation has this id' },
    },
    handler: (_event, input) => call(ResourceBehaviors.deallocate, { id: input.param('id') }),
  });
};
