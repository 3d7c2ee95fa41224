/**
 * The orchestrator's behaviors: what other actors and the REST layer may ask of it, and what
 * executors report to it. Each hands its payload to the orchestrator; jobs go out redacted to
 * senders that are not this node or its roots.
 */
import { ExitedPayload, JobNotifications, ProgressPayload, REPORT_CAPABILITY, type RunReport, StartedPayload, type StartReport } from '../../behaviors/jobs/executor.js';
import { CancelPayload, JobBehaviors, type JobEventsReply, JobIdPayload, type JobListReply, ListPayload, LogsPayload, MAX_LIST_BYTES, type LogsReply, SubmitPayload } from '../../behaviors/jobs/jobs.js';
import { AcceptPayload, DEPLOYMENT_INTERNAL_CAPABILITY } from '../../behaviors/jobs/deployment.js';
import { type Freed, SchedulePayload } from '../../behaviors/jobs/resources.js';
import { ENSEMBLE_INTERNAL_CAPABILITY, PartAssignPayload, PartBehaviors, PartCreatePayload } from '../../behaviors/ensembles/schema.js';
import { redactJob } from '../../behaviors/jobs/redaction.js';
import type { Job, JobSpec } from '../../behaviors/jobs/schema.js';
import { defineBehavior, replyWhenDone } from '../../runtime/behavior.js';
import type { Envelope } from '../../runtime/wire/envelope.js';
import type { z } from 'zod';
import { notFound } from '../../runtime/errors.js';
import type { Storage } from '../../storage/index.js';

/** What the behaviors ask of the orchestrator. */
export interface OrchestratorHandlers {
  trusted(env: Envelope): boolean;
  /** The job store: what status, list and events read. */
  storage: Storage;
  submit(spec: JobSpec, part?: { ensemble: string; part: string; job_id: string }): Promise<Job>;
  assign(jobId: string, node: string): void;
  cancel(id: string, reason?: string): Promise<Job>;
  logs(p: z.output<typeof LogsPayload>): Promise<LogsReply>;
  accept(job: z.output<typeof AcceptPayload>['job'], requester: string): Promise<Job>;
  resourcesFreed(now: Freed): void;
  started(reports: StartReport[]): void;
  exited(reports: RunReport[]): void;
  notePull(p: { job_id: string; status: string; id?: string }): void;
}

export function orchestratorBehaviors(o: OrchestratorHandlers) {
  // Senders that are not this node or its roots get jobs without their environment values.
  const shown = (env: Envelope) => (o.trusted(env) ? (job: Job) => job : redactJob);
  return [
    defineBehavior({
      name: JobBehaviors.submit,
      payload: SubmitPayload,
      handle: async ({ env, payload }) => shown(env)(await o.submit(payload)),
    }),
    defineBehavior({
      name: JobBehaviors.status,
      payload: JobIdPayload,
      handle: async ({ env, payload }) => shown(env)(await status(o.storage, payload.id)),
    }),
    defineBehavior({
      name: JobBehaviors.list,
      payload: ListPayload,
      handle: async ({ env, payload }) => {
        const reply = await list(o.storage, payload);
        return { ...reply, jobs: reply.jobs.map(shown(env)) };
      },
    }),
    defineBehavior({
      name: JobBehaviors.events,
      payload: JobIdPayload,
      // Events carry statuses and reasons, never the environment: nothing to redact.
      handle: ({ payload }) => events(o.storage, payload.id),
    }),
    // Both wait (for a container to stop, for output): they answer later and free the mailbox meanwhile.
    defineBehavior({
      name: JobBehaviors.cancel,
      payload: CancelPayload,
      noReply: true,
      handle: (ctx) => replyWhenDone(ctx, async () => shown(ctx.env)(await o.cancel(ctx.payload.id, ctx.payload.reason))),
    }),
    defineBehavior({
      name: JobBehaviors.logs,
      payload: LogsPayload,
      noReply: true,
      handle: (ctx) => replyWhenDone(ctx, () => o.logs(ctx.payload)),
    }),
    defineBehavior({
      name: JobBehaviors.accept,
      payload: AcceptPayload,
      capability: DEPLOYMENT_INTERNAL_CAPABILITY,
      handle: ({ payload }) => o.accept(payload.job, payload.requester),
    }),
    // Parts of ensembles: created and placed by this node's ensemble actor only.
    defineBehavior({
      name: PartBehaviors.create,
      payload: PartCreatePayload,
      capability: ENSEMBLE_INTERNAL_CAPABILITY,
      handle: ({ payload }) => o.submit(payload.spec, { ensemble: payload.ensemble, part: payload.part, job_id: payload.job_id }),
    }),
    defineBehavior({
      name: PartBehaviors.assign,
      payload: PartAssignPayload,
      capability: ENSEMBLE_INTERNAL_CAPABILITY,
      handle: ({ payload }) => {
        o.assign(payload.job_id, payload.node);
        return {};
      },
    }),
    defineBehavior({
      name: JobBehaviors.schedule,
      payload: SchedulePayload,
      handle: ({ payload }) => {
        o.resourcesFreed(payload);
        return {};
      },
    }),
    // What the executors report about runs.
    defineBehavior({
      name: JobNotifications.started,
      payload: StartedPayload,
      capability: REPORT_CAPABILITY,
      handle: ({ payload }) => o.started(payload.runs),
    }),
    defineBehavior({
      name: JobNotifications.exited,
      payload: ExitedPayload,
      capability: REPORT_CAPABILITY,
      handle: ({ payload }) => o.exited(payload.runs),
    }),
    defineBehavior({
      name: JobNotifications.progress,
      payload: ProgressPayload,
      capability: REPORT_CAPABILITY,
      handle: ({ payload }) => o.notePull(payload),
    }),
  ];
}

async function status(storage: Storage, id: string): Promise<Job> {
  const job = await storage.jobs.get(id);
  if (!job) throw notFound(`job ${id} not found`);
  return job;
}

async function list(storage: Storage, p: z.output<typeof ListPayload>): Promise<JobListReply> {
  const [jobs, total] = await Promise.all([storage.jobs.list({ ...p, maxBytes: MAX_LIST_BYTES }), storage.jobs.count({ status: p.status })]);
  return { jobs, total };
}

/** Every stored transition of the job, oldest first. */
async function events(storage: Storage, id: string): Promise<JobEventsReply> {
  if (!(await storage.jobs.get(id))) throw notFound(`job ${id} not found`);
  const stored = await storage.events.listFor(id);
  return { id, events: stored.map((e) => ({ at: e.at, from: e.from_status, to: e.to_status, reason: e.reason })) };
}
