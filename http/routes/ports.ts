/**
 * /api/v1/jobs/{id}/ports: what a job exposes, and forwards from a local port of this node to
 * one of them (README "Ports and tunnels"). Reading the job through the orchestrator first is
 * the access check: whoever may not read the job may neither see nor reach its ports.
 */
import * as z from 'zod';
import { JobBehaviors, JobIdSchema, ORCHESTRATOR_INBOX } from '../../behaviors/jobs/jobs.js';
import type { Job } from '../../behaviors/jobs/schema.js';
import { JsonBody } from '../errors.js';
import type { RouteModule } from './types.js';

/** One local listener tunnelled to a job's port. */
export const ForwardSchema = z.object({
  id: z.uuid(),
  job_id: z.uuid(),
  port: z.int(),
  /** Where it listens on this node, ADDR:PORT. */
  local: z.string(),
});
export type Forward = z.output<typeof ForwardSchema>;

/** What the routes need of the node's forwards (daemon/tunnels.ts). */
export interface PortForwarder {
  list(jobId?: string): Forward[];
  open(job: Job, port: number, local?: string): Promise<Forward>;
  close(jobId: string, id: string): Forward;
}

export const JobPortsReply = z.object({
  job_id: z.uuid(),
  status: z.string(),
  /** The node it runs on (null: not placed yet). */
  node: z.string().nullable(),
  ports: z.array(z.int()),
  forwards: z.array(ForwardSchema),
});

const jobId = { id: { schema: JobIdSchema, what: 'job id' } };
const port = {
  port: {
    schema: z
      .string()
      .regex(/^\d{1,5}$/, 'a port is a whole number from 1 to 65535')
      .transform(Number)
      .refine((p) => p >= 1 && p <= 65535, 'a port is a whole number from 1 to 65535'),
    what: 'port',
  },
};
const ForwardBody = z.strictObject({
  /** ADDR:PORT, ADDR or PORT to listen on; default 127.0.0.1 and a free port. */
  local: z.string().max(100).optional(),
});
const ANSWERS = {
  400: { description: 'a bad job id, port or local address, or a port the job does not declare' },
  403: { description: 'the caller may not read this job' },
  404: { description: 'no job has this id' },
  503: { description: "a bounded queue is full (the orchestrator's mailbox, rest.max_pending), or tunnel.max_forwards forwards are open" },
};

export const portRoutes =
  (forwards: PortForwarder): RouteModule =>
  ({ table, http }) => {
    const readJob = async (id: string) => (await http.call(ORCHESTRATOR_INBOX, JobBehaviors.status, { id })) as Job;

    table.add({
      method: 'GET',
      path: '/api/v1/jobs/:id/ports',
      operationId: 'getJobPorts',
      summary: 'The ports a job exposes, where it runs, and the forwards open to them',
      tags: ['jobs'],
      params: jobId,
      responses: { ...ANSWERS, 200: { description: 'its ports', schema: JobPortsReply } },
      handler: async (_event, input) => {
        const job = await readJob(input.param('id'));
        return { job_id: job.id, status: job.status, node: job.node, ports: job.ports, forwards: forwards.list(job.id) };
      },
    });

    table.add({
      method: 'POST',
      path: '/api/v1/jobs/:id/ports/:port/forward',
      operationId: 'forwardJobPort',
      summary: 'Listen on a local port of this node, each connection tunnelled to the job port wherever the job runs',
      description:
        'The listener lives in the node, whose libp2p identity the provider checks against the job\'s requester; it lasts until DELETE, the job ends or the node stops. A job running on this node is connected to directly.',
      tags: ['jobs'],
      params: { ...jobId, ...port },
      body: { schema: ForwardBody, what: 'forward' },
      responses: { ...ANSWERS, 201: { description: 'the forward, with the address it listens on', schema: ForwardSchema }, 409: { description: 'the local address cannot be listened on, or the job has ended' } },
      handler: async (_event, input) => {
        const job = await readJob(input.param('id'));
        const body = await input.body();
        return new JsonBody(JSON.stringify(await forwards.open(job, input.param('port'), body.local)), 201);
      },
    });

    table.add({
      method: 'DELETE',
      path: '/api/v1/jobs/:id/forwards/:forward',
      operationId: 'closeJobForward',
      summary: 'Stop a forward: its listener closes and its connections end',
      tags: ['jobs'],
      params: { ...jobId, forward: { schema: z.uuid(), what: 'forward id' } },
      responses: { ...ANSWERS, 200: { description: 'the forward stopped', schema: ForwardSchema } },
      handler: async (_event, input) => {
        const job = await readJob(input.param('id'));
        return forwards.close(job.id, input.param('forward'));
      },
    });
  };
