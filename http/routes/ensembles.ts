/**
 * /api/v1/ensembles (README "Ensembles"): deploy, list, inspect and cancel ensembles. Each
 * request is an envelope to the ensemble actor; a part's job answers on /api/v1/jobs like any.
 */
import * as z from 'zod';
import { ENSEMBLE_INBOX, EnsembleBehaviors, EnsembleSchema, type EnsembleSpec, EnsembleSpecSchema } from '../../behaviors/ensembles/schema.js';
import { volumesOf } from '../../behaviors/jobs/files.js';
import { errorText, invalid } from '../../runtime/errors.js';
import { resolveJobSources, volumeMissing } from './outputs.js';
import { JsonBody } from '../errors.js';
import { wholeNumberParam } from '../query.js';
import type { ResponseDoc } from '../route-table.js';
import type { RouteModule } from './types.js';
import { cancelWaitMs, TOTAL_HEADER } from './jobs.js';
import { CancelPayload } from '../../behaviors/jobs/jobs.js';
import { callerId } from '../../behaviors/caller-id.js';

const ensembleId = { id: { schema: callerId('an ensemble id'), what: 'ensemble id' } };

const ID_ANSWERS: Record<number, ResponseDoc> = {
  400: { description: 'a malformed ensemble id' },
  404: { description: 'no ensemble has this id' },
};
const BEHAVIOR_ANSWERS: Record<number, ResponseDoc> = {
  503: { description: "a bounded queue is full (the ensemble actor's mailbox, rest.max_pending)" },
};

const ListQuery = z.object({
  limit: wholeNumberParam({
    pattern: /^\d{1,9}$/,
    min: 1,
    max: 100,
    message: (raw) => `limit: '${raw}' is not a whole number from 1 to 100`,
    description: 'ensembles in one page, 1 to 100 (default 100)',
  }).optional(),
  offset: wholeNumberParam({
    pattern: /^\d{1,9}$/,
    min: 0,
    max: Number.MAX_SAFE_INTEGER,
    message: (raw) => `offset: '${raw}' is not a whole number`,
    description: 'ensembles to skip',
  }).optional(),
});

const CancelQuery = z.object({ reason: CancelPayload.shape.reason.meta({ description: "why it is cancelled (at most 500 characters), kept as its reason and its parts' error" }) });

export const ensembleRoutes: RouteModule = ({ table, config, http, system, volumes }) => {
  const call = (be: string, payload: unknown, ttlMs?: number) => http.call(ENSEMBLE_INBOX, be, payload, ttlMs);

  /**
   * Each part's inputs as a job's are where it is submitted: a `job:` source resolved to the CID
   * its job's manifest names (only this node holds that manifest). A volume is its node's own,
   * and a part may be placed on any node: a part mounting one is pinned to this node.
   */
  const withPartInputs = async (spec: EnsembleSpec): Promise<EnsembleSpec> => {
    const parts: EnsembleSpec['parts'] = {};
    for (const [name, part] of Object.entries(spec.parts)) {
      for (const volume of volumesOf(part.inputs)) {
        if (!part.placement?.node || !system.isHere(part.placement.node)) {
          throw invalid(`parts.${name}.inputs: a part mounting volume:${volume} runs on this node, where the volume is: pin it there (placement.node ${system.host})`);
        }
        const missing = volumeMissing(volume, volumes);
        if (missing) throw invalid(`parts.${name}.inputs: volume:${volume}: ${missing}`);
      }
      try {
        parts[name] = await resolveJobSources(part, http, system);
      } catch (e) {
        throw invalid(`parts.${name}.inputs: ${errorText(e)}`);
      }
    }
    return { ...spec, parts };
  };

  table.add({
    method: 'POST',
    path: '/api/v1/ensembles',
    operationId: 'deployEnsemble',
    summary: 'Deploy an ensemble: parts placed all or nothing, reaching each other as <part>.internal',
    tags: ['ensembles'],
    body: { schema: EnsembleSpecSchema, what: 'ensemble spec', description: 'The ensemble spec; each part is a job spec plus kind, restart, optional and near.' },
    responses: {
      ...BEHAVIOR_ANSWERS,
      201: { description: 'the new Ensemble, pending', schema: EnsembleSchema },
      400: { description: 'naming every bad field (a part name that is not a DNS label or is reserved, a near cycle or unknown part, ports out of range or twice), or a part whose job this node refuses' },
      409: { description: 'a part no known node could ever hold, naming it' },
    },
    handler: async (_event, input) => new JsonBody(JSON.stringify(await call(EnsembleBehaviors.submit, await withPartInputs(await input.body()))), 201),
  });

  table.add({
    method: 'GET',
    path: '/api/v1/ensembles',
    operationId: 'listEnsembles',
    summary: 'List ensembles, newest first',
    tags: ['ensembles'],
    query: ListQuery,
    responses: {
      ...BEHAVIOR_ANSWERS,
      200: {
        description: 'one page of Ensembles, at most 8 MiB of them (a page of large specs ends early: page on with `offset` by the count received)',
        schema: z.array(EnsembleSchema),
        headers: { 'X-Total-Count': { description: 'how many ensembles there are over all pages', schema: z.int().nonnegative() } },
      },
    },
    handler: async (_event, input) => {
      const reply = (await call(EnsembleBehaviors.list, input.query())) as { ensembles: unknown[]; total: number };
      // As the jobs list: the body stays the list, how many there are over all pages is a header.
      return new JsonBody(JSON.stringify(reply.ensembles), 200, { [TOTAL_HEADER]: String(reply.total) });
    },
  });

  table.add({
    method: 'GET',
    path: '/api/v1/ensembles/:id',
    operationId: 'getEnsemble',
    summary: 'An ensemble: its status and each part (its job, node and status)',
    tags: ['ensembles'],
    params: ensembleId,
    responses: { ...BEHAVIOR_ANSWERS, ...ID_ANSWERS, 200: { description: 'the Ensemble', schema: EnsembleSchema } },
    handler: (_event, input) => call(EnsembleBehaviors.status, { id: input.param('id') }),
  });

  // Answers once every part has stopped: a job's cancel, for each at once.
  const cancelTtlMs = cancelWaitMs(config);
  table.add({
    method: 'DELETE',
    path: '/api/v1/ensembles/:id',
    operationId: 'cancelEnsemble',
    summary: 'Cancel an ensemble: every part is stopped, every lease let go',
    tags: ['ensembles'],
    params: ensembleId,
    query: CancelQuery,
    responses: {
      ...BEHAVIOR_ANSWERS,
      ...ID_ANSWERS,
      200: { description: 'the Ensemble, failed with reason `cancelled` (`cancelled: <reason>`)', schema: EnsembleSchema },
      409: { description: 'the ensemble has already ended' },
    },
    handler: async (_event, input) => {
      const { reason } = input.query();
      return call(EnsembleBehaviors.cancel, { id: input.param('id'), ...(reason ? { reason } : {}) }, cancelTtlMs);
    },
  });
};
