/**
 * /api/v1/jobs: submit, list, inspect, cancel and read the output of jobs. Each request is an
 * envelope to the orchestrator's behaviors; following a job's output is a series of long
 * polls of /dms/job/logs streamed to the client as server-sent events, each poll made only
 * once the client has taken the last page.
 */
import type { H3Event } from 'h3';
import * as z from 'zod';
import {
  CancelPayload,
  JobBehaviors,
  JobEventsReply,
  JobIdSchema,
  type JobListReply,
  LIST_ORDERS,
  LogChunkSchema,
  LogIdSchema,
  LogsReply,
  MAX_LIST_LIMIT,
  MAX_LOGS_LIMIT,
  MAX_LOGS_WAIT_MS,
  ORCHESTRATOR_INBOX,
} from '../../behaviors/jobs/jobs.js';
import { redactJob } from '../../behaviors/jobs/redaction.js';
import { type Job, JobSchema, JobSpecSchema, JobStatusSchema } from '../../behaviors/jobs/schema.js';
import { principalOf } from '../auth.js';
import { DmsError, errorText } from '../../runtime/errors.js';
import type { HttpApi } from '../actor.js';
import { ErrorBody, JsonBody } from '../errors.js';
import { booleanParam, shown, wholeNumberParam } from '../query.js';
import type { ResponseDoc } from '../route-table.js';
import { refuseNodeOfferingNothing } from './peers.js';
import type { RouteModule } from './types.js';
import type { Config } from '../../runtime/config.js';
import { resolveJobInputs } from './outputs.js';
import { KEEPALIVE, SSE_HEADERS } from '../sse.js';

/** The REST `viewer` role reads jobs without their environment values (secrets). */
const forCaller = (event: H3Event) => (principalOf(event)?.role === 'viewer' ? redactJob : (job: Job) => job);

/** How long a cancel may take to answer: once the run has stopped, which can take the whole stop grace period. */
export const cancelWaitMs = (config: Config): number => (config.jobs.stop_grace_s + 30) * 1000;

/** How many jobs match a list's filter over all its pages. */
export const TOTAL_HEADER = 'x-total-count';

/**
 * How long one poll of a followed job waits for news before the stream asks again. A follower
 * that closed keeps its slot until its last poll answers (the poll cannot be called back), so
 * this is also how long a closed follower's slot may stay taken.
 */
const FOLLOW_POLL_MS = 5_000;
/**
 * Bytes of stored output one poll of a follower reads at most (`limit` may ask for less). A
 * follower that reads slowly holds one such page, as events, in its connection's buffer: this
 * and the follower caps bound what slow followers cost the node.
 */
export const FOLLOW_PAGE_BYTES = 64 * 1024;
/** Seconds a follower refused for a full cap is told to wait: a closed follower's slot is free within FOLLOW_POLL_MS. */
const FOLLOW_RETRY_S = Math.ceil(FOLLOW_POLL_MS / 1000);
/** The envelope of a poll outlives its wait, so a reply that comes at the last moment is still taken. */
const FOLLOW_TTL_MS = MAX_LOGS_WAIT_MS + 10_000;

/** The job id of the path, checked as the behaviors check it: a bad one is a 400, not a refusal from the kernel. */
const jobId = { id: { schema: JobIdSchema, what: 'job id' } };

/**
 * `?reason=…`: why the job is cancelled, kept as its error (`cancelled: <reason>`), which the
 * node that submitted it sees too (`dms offboard --force` says the operator took the share back).
 */
const CancelQuery = z.object({
  reason: CancelPayload.shape.reason.meta({ description: 'why it is cancelled (at most 500 characters), recorded as its error' }),
});

/** `?status=a,b&limit=n&offset=m&order=asc|desc`, each checked: a bad one is a 400 naming it. */
export const JobListQuery = z.object({
  status: z
    .string()
    .optional()
    .transform((value, ctx) => {
      // Absent: every job. Empty (`?status=`) is not a status, and is refused as any other.
      if (value === undefined) return undefined;
      const statuses: z.output<typeof JobStatusSchema>[] = [];
      for (const s of value.split(',')) {
        const parsed = JobStatusSchema.safeParse(s.trim());
        if (!parsed.success) {
          ctx.addIssue({ code: 'custom', message: `status: '${shown(s)}' is not one of ${JobStatusSchema.options.join(', ')}` });
          return z.NEVER;
        }
        statuses.push(parsed.data);
      }
      return statuses;
    })
    .meta({ description: `only jobs in these statuses, comma-separated: ${JobStatusSchema.options.join(', ')}` }),
  limit: wholeNumberParam({
    pattern: /^\d{1,9}$/,
    min: 1,
    max: MAX_LIST_LIMIT,
    message: (raw) => `limit: '${raw}' is not a whole number from 1 to ${MAX_LIST_LIMIT}`,
    description: `jobs in one page, 1 to ${MAX_LIST_LIMIT} (default 100)`,
  }).optional(),
  offset: wholeNumberParam({
    pattern: /^\d{1,9}$/,
    min: 0,
    max: Number.MAX_SAFE_INTEGER,
    message: (raw) => `offset: '${raw}' is not a whole number`,
    description: 'jobs to skip: the page after `offset` jobs',
  }).optional(),
  order: z
    .enum(LIST_ORDERS, { error: (iss) => `order: '${shown(iss.input)}' is not ${LIST_ORDERS.join(' or ')}` })
    .optional()
    .meta({ description: 'by submission time: desc (newest first, the default) or asc' }),
});

/**
 * `?from=<byte offset>&limit=<bytes>`: a page of stored output, from the beginning unless `from`
 * says otherwise; `next` of an answer continues it. A follow may also start at `from=end`.
 */
export const LogsQuery = z
  .object({
    follow: booleanParam('true: server-sent events until the job ends, instead of one page'),
    previous: booleanParam(
      "true: the output of the job's run before its current (or last) one, kept on this node when the job was placed again (its node lost, or a pinned node back); 404 when none is kept. Read in pages, not followed",
    ),
    from: z
      .string()
      .regex(/^(?:\d{1,15}|end)$/, { error: (iss) => `from: '${shown(iss.input)}' is not a byte offset (a whole number, or end when following)` })
      .transform((s) => (s === 'end' ? ('end' as const) : Number(s)))
      .optional()
      .meta({ description: 'byte offset to read from (a `next` of an earlier answer; default 0); when following also `end`, for only what comes next' }),
    log: LogIdSchema.optional().meta({
      description:
        "the `log` of the answer whose `next` is `from`: when the job has run again since (placed again), the rest of that run's output comes first, then the new run's from its start; without it `from` is an offset into the current run's output",
    }),
    limit: wholeNumberParam({
      pattern: /^\d{1,9}$/,
      min: 1,
      max: MAX_LOGS_LIMIT,
      message: (raw) => `limit: '${raw}' is not a whole number of bytes from 1 to ${MAX_LOGS_LIMIT}`,
      description: `bytes of stored output to read at most, 1 to ${MAX_LOGS_LIMIT} (whole chunks: one longer chunk is still given whole); when following, per poll and at most ${FOLLOW_PAGE_BYTES}`,
    }).optional(),
  })
  .superRefine((q, ctx) => {
    if (q.from === 'end' && !q.follow) ctx.addIssue({ code: 'custom', path: ['from'], message: "from: 'end' is not a byte offset (a whole number); end is for follow=true" });
    if (q.previous && q.follow) ctx.addIssue({ code: 'custom', path: ['previous'], message: 'previous: a run before the current one has ended, so its output is read in pages, not followed (drop follow)' });
  });

/** The server-sent events of a followed job: the JSON `data` of each, by event name. */
const FollowEvents = {
  status: LogsReply.pick({ status: true, pending_reason: true }),
  log: LogChunkSchema,
  end: LogsReply.pick({ id: true, status: true, exit_code: true, error: true }),
  error: ErrorBody,
};

const JOB_ID_ANSWERS: Record<number, ResponseDoc> = {
  400: { description: 'a malformed job id' },
  404: { description: 'no job has this id' },
};
/** Routes that are envelopes to the orchestrator: what its mailbox and the kernel may answer. */
const BEHAVIOR_ANSWERS: Record<number, ResponseDoc> = {
  503: { description: "a bounded queue is full (the orchestrator's mailbox, rest.max_pending)" },
};

export const jobRoutes: RouteModule = ({ table, config, system, http, log, volumes }) => {
  const call = (be: string, payload: unknown, ttlMs?: number) => http.call(ORCHESTRATOR_INBOX, be, payload, ttlMs);
  const followers = new FollowerSlots(config.rest.max_log_followers, config.rest.max_log_followers_per_job);

  table.add({
    method: 'POST',
    path: '/api/v1/jobs',
    operationId: 'submitJob',
    summary: 'Submit a job',
    description: 'Sizes, cores and the command may be written short (`"memory": "512MiB"`, `"cpu": 0.5`, `"command": "echo hi"`); the Job answered has them in their canonical form.',
    tags: ['jobs'],
    body: { schema: JobSpecSchema, what: 'job spec', description: 'The job spec; unknown fields are refused.' },
    responses: {
      ...BEHAVIOR_ANSWERS,
      201: { description: 'the new Job, pending', schema: JobSchema },
      400: { description: 'naming every bad field of the spec and the forms it accepts, or an executor this node lacks' },
      409: { description: 'a job no known node could ever hold, naming the resource, or pinned to a peer whose signed profile offers nothing' },
    },
    handler: async (_event, input) => {
      const spec = await input.body();
      await refuseNodeOfferingNothing(spec, { system, http });
      const resolved = await resolveJobInputs(spec, http, system, volumes);
      // Checked once: the orchestrator's submit takes the same schema, and a spec the inputs'
      // resolution rewrote is checked there again.
      const checked = resolved === spec ? JobSpecSchema : undefined;
      return new JsonBody(JSON.stringify(await http.call(ORCHESTRATOR_INBOX, JobBehaviors.submit, resolved, undefined, checked)), 201);
    },
  });

  table.add({
    method: 'GET',
    path: '/api/v1/jobs',
    operationId: 'listJobs',
    summary: 'List jobs, newest first',
    tags: ['jobs'],
    query: JobListQuery,
    responses: {
      ...BEHAVIOR_ANSWERS,
      200: {
        description: 'one page of Jobs (environment values redacted for the viewer role)',
        schema: z.array(JobSchema),
        headers: { 'X-Total-Count': { description: 'how many jobs match the filter over all pages', schema: z.int().nonnegative() } },
      },
    },
    handler: async (event, input) => {
      const reply = (await call(JobBehaviors.list, input.query())) as JobListReply;
      // The body stays the list the REST contract promises; how many match over all pages is a header.
      return new JsonBody(JSON.stringify(reply.jobs.map(forCaller(event))), 200, { [TOTAL_HEADER]: String(reply.total) });
    },
  });

  table.add({
    method: 'GET',
    path: '/api/v1/jobs/:id',
    operationId: 'getJob',
    summary: 'A job',
    tags: ['jobs'],
    params: jobId,
    responses: { ...BEHAVIOR_ANSWERS, ...JOB_ID_ANSWERS, 200: { description: 'the Job (environment values redacted for the viewer role)', schema: JobSchema } },
    handler: async (event, input) => forCaller(event)((await call(JobBehaviors.status, { id: input.param('id') })) as Job),
  });

  table.add({
    method: 'GET',
    path: '/api/v1/jobs/:id/events',
    operationId: 'getJobEvents',
    summary: "A job's history",
    description: 'Every stored transition, oldest first; `from` is null for the creation and equal to `to` for a change that kept the status (a pending reason, an image pull step).',
    tags: ['jobs'],
    params: jobId,
    responses: { ...BEHAVIOR_ANSWERS, ...JOB_ID_ANSWERS, 200: { description: "the job's transitions", schema: JobEventsReply } },
    handler: (_event, input) => call(JobBehaviors.events, { id: input.param('id') }),
  });

  const cancelTtlMs = cancelWaitMs(config);
  table.add({
    method: 'DELETE',
    path: '/api/v1/jobs/:id',
    operationId: 'cancelJob',
    summary: 'Cancel a job',
    description: 'Answers once its run is stopped and gone, which can take jobs.stop_grace_s.',
    tags: ['jobs'],
    params: jobId,
    query: CancelQuery,
    responses: {
      ...BEHAVIOR_ANSWERS,
      ...JOB_ID_ANSWERS,
      200: { description: 'the Job, failed with error `cancelled` (`cancelled: <reason>` when one is given)', schema: JobSchema },
      409: { description: 'the job has already ended' },
    },
    handler: async (event, input) => {
      const { reason } = input.query();
      return forCaller(event)((await call(JobBehaviors.cancel, { id: input.param('id'), ...(reason ? { reason } : {}) }, cancelTtlMs)) as Job);
    },
  });

  table.add({
    method: 'GET',
    path: '/api/v1/jobs/:id/logs',
    operationId: 'getJobLogs',
    summary: "A job's output: one page, or followed as server-sent events",
    description:
      'A page of stored output from byte offset `from`; its `next` continues it, `more` says more is stored already, `done` that the job ended and all was given. ' +
      'With `follow`, server-sent events until the job ends: `status` when its status or pending reason changes, `log` for each chunk, then `end`; ' +
      '`error` if following fails. An unknown job is still a 404, before the stream opens. ' +
      "With `previous`, pages of the output of the job's run before its current one (kept when the job was placed again; `done` once all of it was given), 404 when none is kept. " +
      'Each poll reads the next page only once the client has taken the last one; followers open at once are capped per job and per node.',
    tags: ['jobs'],
    params: jobId,
    query: LogsQuery,
    responses: {
      ...BEHAVIOR_ANSWERS,
      ...JOB_ID_ANSWERS,
      200: {
        description: 'a page of output, or (follow) the stream of events',
        schema: LogsReply,
        content: { 'text/event-stream': { description: 'with follow: events status, log, end (and error), each with JSON data', events: FollowEvents } },
      },
      503: {
        description:
          "a bounded queue is full (the orchestrator's mailbox, rest.max_pending), or (follow) as many followers as rest.max_log_followers_per_job (this job) or rest.max_log_followers (the node) allow are open; Retry-After says when to try again",
      },
    },
    handler: (event, input) => {
      const query = input.query();
      const id = input.param('id');
      if (query.follow) return followLogs(http, id, query, config.rest.sse_keepalive_s * 1000, followers.take(id));
      return call(JobBehaviors.logs, { id, from: query.from ?? 0, limit: query.limit, ...(query.previous ? { previous: true } : {}), ...(query.log ? { log: query.log } : {}) });
    },
  });
};

/**
 * The followers of job output open at once, per job and in total. A slot is held from the
 * request until the stream is closed and its last poll has answered, so the caps bound the
 * pages and polls followers hold, not only their connections.
 */
class FollowerSlots {
  private total = 0;
  private readonly perJob = new Map<string, number>();

  constructor(
    private readonly maxTotal: number,
    private readonly maxPerJob: number,
  ) {}

  /** A slot for a follower of job `id`, or a 503 naming the cap that is full; the function returned frees it (once). */
  take(id: string): () => void {
    const ofJob = this.perJob.get(id) ?? 0;
    if (ofJob >= this.maxPerJob) {
      throw new DmsError('overloaded', `job ${id} has ${ofJob} log followers open, as many as rest.max_log_followers_per_job (${this.maxPerJob}) allows; close one or retry later`, {
        retryAfter: FOLLOW_RETRY_S,
      });
    }
    if (this.total >= this.maxTotal) {
      throw new DmsError('overloaded', `this node has ${this.total} log followers open, as many as rest.max_log_followers (${this.maxTotal}) allows; close one or retry later`, {
        retryAfter: FOLLOW_RETRY_S,
      });
    }
    this.total++;
    this.perJob.set(id, ofJob + 1);
    let freed = false;
    return () => {
      if (freed) return;
      freed = true;
      this.total--;
      const left = (this.perJob.get(id) ?? 1) - 1;
      if (left > 0) this.perJob.set(id, left);
      else this.perJob.delete(id);
    };
  }
}

/** One server-sent event; JSON data is one line (JSON.stringify escapes line breaks), so one `data:` field. */
const sse = <K extends keyof typeof FollowEvents>(name: K, data: z.input<(typeof FollowEvents)[K]>): string => `event: ${name}\ndata: ${JSON.stringify(data)}\n\n`;

/**
 * Server-sent events until the job ends: `status` when its status or pending reason changes,
 * `log` for each chunk of output ({stream, data, at}) from `?from` (default: the beginning, as
 * `docker logs -f` shows it; `from=end` for only what comes next),
 * then `end` with the final job fields.
 * An unknown job is still an ordinary 404, since the first poll happens before the stream opens.
 *
 * The stream is pulled: the connection asks for more only once the socket has drained what it
 * was given, and only then is the next page polled. A follower that reads slowly, or not at
 * all, holds one page in its socket's buffer, never the log. `release` frees its slot once the
 * stream is over and no poll of it is left waiting.
 */
async function followLogs(http: HttpApi, id: string, query: z.output<typeof LogsQuery>, keepaliveMs: number, release: () => void): Promise<Response> {
  const limit = Math.min(query.limit ?? FOLLOW_PAGE_BYTES, FOLLOW_PAGE_BYTES);
  let polling = false;
  let closed = false;
  const poll = async (from: number | 'end', wait: number, log: string | null = query.log ?? null): Promise<LogsReply> => {
    polling = true;
    try {
      return LogsReply.parse(await http.call(ORCHESTRATOR_INBOX, JobBehaviors.logs, { id, from, limit, wait_ms: wait, ...(log ? { log } : {}) }, FOLLOW_TTL_MS));
    } finally {
      polling = false;
      if (closed) release();
    }
  };
  let first: LogsReply | undefined;
  try {
    first = await poll(query.from ?? 0, 0);
  } catch (e) {
    release();
    throw e;
  }
  const close = () => {
    closed = true;
    if (!polling) release();
  };
  const encoder = new TextEncoder();
  let wrote = Date.now();
  let shownState = '';
  // Each poll reads on from the offset the last one ended at, in the log it was in: the output is
  // never read twice, and a run placed again goes on from its start after the rest of the last.
  let next = 0;
  let more = false;
  let log: string | null = null;
  /** The events of one answer, '' when it brings no news. */
  const eventsOf = (reply: LogsReply): string => {
    let text = '';
    const state = `${reply.status}|${reply.pending_reason ?? ''}`;
    if (state !== shownState) {
      shownState = state;
      text += sse('status', { status: reply.status, pending_reason: reply.pending_reason });
    }
    for (const chunk of reply.chunks) text += sse('log', chunk);
    if (reply.done) text += sse('end', { id: reply.id, status: reply.status, exit_code: reply.exit_code, error: reply.error });
    return text;
  };
  const body = new ReadableStream<Uint8Array>(
    {
      pull: async (controller) => {
        try {
          for (;;) {
            // More stored already: no wait.
            const reply = first ?? (await poll(next, more ? 0 : Math.min(FOLLOW_POLL_MS, keepaliveMs), log));
            first = undefined;
            if (closed) return;
            next = reply.next;
            more = reply.more;
            log = reply.log;
            const text = eventsOf(reply) || (Date.now() - wrote >= keepaliveMs ? KEEPALIVE : '');
            if (text) {
              controller.enqueue(encoder.encode(text));
              wrote = Date.now();
            }
            if (reply.done) {
              controller.close();
              close();
              return;
            }
            if (text) return;
          }
        } catch (e) {
          if (closed) return;
          controller.enqueue(encoder.encode(sse('error', { error: errorText(e) })));
          controller.close();
          close();
        }
      },
      cancel: close,
    },
    // Nothing is read ahead of the connection: a page is polled only when it asks for one.
    { highWaterMark: 0 },
  );
  return new Response(body, { headers: SSE_HEADERS });
}
