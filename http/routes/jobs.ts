/**
 * /api/v1/jobs: submit, list, inspect, cancel and read the output of jobs. Each request is an
 * envelope to the orchestrator's behaviors; following a job's output is a series of long
 * polls of /dms/job/logs streamed to the client as server-sent events.
 */
import { createEventStream, type EventStream, type EventStreamMessage, type H3Event } from 'h3';
import {
  JobBehaviors,
  JobIdSchema,
  type JobListReply,
  LIST_ORDERS,
  LogsReply,
  MAX_LIST_LIMIT,
  MAX_LOGS_LIMIT,
  MAX_LOGS_WAIT_MS,
  ORCHESTRATOR_INBOX,
  type ListPayload,
} from '../../behaviors/jobs/jobs.js';
import { redactJob } from '../../behaviors/jobs/redaction.js';
import { type Job, JobSpecSchema, JobStatusSchema, parseWith } from '../../behaviors/jobs/schema.js';
import { principalOf } from '../auth.js';
import { errorText, invalid } from '../../runtime/errors.js';
import type { Logger } from '../../runtime/log.js';
import type { HttpApi } from '../actor.js';
import { errorBody, JsonBody, toWebResponse } from '../errors.js';
import { route } from '../handler.js';
import { param, readJson } from './behavior-call.js';

/** The job id of the path, checked as the behaviors check it: a bad one is a 400, not a refusal from the kernel. */
const jobIdOf = (event: H3Event): string => parseWith(JobIdSchema, param(event, 'id'), 'job id');

/** The REST `viewer` role reads jobs without their environment values (secrets). */
const forCaller = (event: H3Event) => (principalOf(event)?.role === 'viewer' ? redactJob : (job: Job) => job);
import type { RouteModule } from './types.js';

/** How many jobs match a list's filter over all its pages. */
export const TOTAL_HEADER = 'x-total-count';

/** How long one poll of a followed job waits for news before the stream asks again. */
const FOLLOW_POLL_MS = 15_000;
/** The envelope of a poll outlives its wait, so a reply that comes at the last moment is still taken. */
const FOLLOW_TTL_MS = MAX_LOGS_WAIT_MS + 10_000;

export const jobRoutes: RouteModule = ({ app, config, http, log }) => {
  const call = (be: string, payload: unknown, ttlMs?: number) => http.call(ORCHESTRATOR_INBOX, be, payload, ttlMs);

  app.post(
    '/api/v1/jobs',
    route(log, async (event) => {
      const spec = parseWith(JobSpecSchema, await readJson(event, config.rest.body_limit, 'job spec'), 'job spec');
      return new JsonBody(JSON.stringify(await call(JobBehaviors.submit, spec)), 201);
    }),
  );

  app.get(
    '/api/v1/jobs',
    route(log, async (event) => {
      const reply = (await call(JobBehaviors.list, listQuery(event.url.searchParams))) as JobListReply;
      // The body stays the list the REST contract promises; how many match over all pages is a header.
      return new JsonBody(JSON.stringify(reply.jobs.map(forCaller(event))), 200, { [TOTAL_HEADER]: String(reply.total) });
    }),
  );

  app.get(
    '/api/v1/jobs/:id',
    route(log, async (event) => forCaller(event)((await call(JobBehaviors.status, { id: jobIdOf(event) })) as Job)),
  );

  app.get(
    '/api/v1/jobs/:id/events',
    route(log, async (event) => call(JobBehaviors.events, { id: jobIdOf(event) })),
  );

  // A cancel answers once the run has stopped, which can take the whole stop grace period.
  const cancelTtlMs = (config.jobs.stop_grace_s + 30) * 1000;
  app.delete(
    '/api/v1/jobs/:id',
    route(log, async (event) => forCaller(event)((await call(JobBehaviors.cancel, { id: jobIdOf(event) }, cancelTtlMs)) as Job)),
  );

  const output = route(log, (event) => {
    const { from, limit } = logsQuery(event.url.searchParams) as { from?: number; limit?: number };
    return call(JobBehaviors.logs, { id: jobIdOf(event), from: from ?? 0, limit });
  });
  app.get('/api/v1/jobs/:id/logs', async (event) => {
    const follow = event.url.searchParams.get('follow');
    if (follow !== 'true' && follow !== '1') return output(event);
    return followLogs(event, http, log);
  });
};

/**
 * `?from=<byte offset>&limit=<bytes>`: a page of stored output, from the beginning unless `from`
 * says otherwise; `next` of an answer continues it. A follow may also start at `from=end`.
 */
function logsQuery(q: URLSearchParams, follow = false): { from?: number | 'end'; limit?: number } {
  const query: { from?: number | 'end'; limit?: number } = {};
  const from = q.get('from');
  if (from === 'end' && follow) query.from = 'end';
  else if (from !== null) {
    if (!/^\d{1,15}$/.test(from)) throw invalid(`from: '${from.slice(0, 40)}' is not a byte offset (a whole number${follow ? ', or end' : ''})`);
    query.from = Number(from);
  }
  const limit = q.get('limit');
  if (limit !== null) {
    if (!/^\d{1,9}$/.test(limit) || Number(limit) < 1 || Number(limit) > MAX_LOGS_LIMIT) {
      throw invalid(`limit: '${limit.slice(0, 40)}' is not a whole number of bytes from 1 to ${MAX_LOGS_LIMIT}`);
    }
    query.limit = Number(limit);
  }
  return query;
}

/** `?status=a,b&limit=n&offset=m&order=asc|desc`, each checked: a bad one is a 400 naming it. */
function listQuery(q: URLSearchParams): ListPayload {
  const query: ListPayload = {};
  const status = q.get('status');
  if (status) {
    query.status = status.split(',').map((s) => {
      const parsed = JobStatusSchema.safeParse(s.trim());
      if (!parsed.success) throw invalid(`status: '${s}' is not one of ${JobStatusSchema.options.join(', ')}`);
      return parsed.data;
    });
  }
  const limit = q.get('limit');
  if (limit !== null) {
    if (!/^\d{1,9}$/.test(limit) || Number(limit) < 1 || Number(limit) > MAX_LIST_LIMIT) {
      throw invalid(`limit: '${limit}' is not a whole number from 1 to ${MAX_LIST_LIMIT}`);
    }
    query.limit = Number(limit);
  }
  const offset = q.get('offset');
  if (offset !== null) {
    if (!/^\d{1,9}$/.test(offset)) throw invalid(`offset: '${offset}' is not a whole number`);
    query.offset = Number(offset);
  }
  const order = q.get('order');
  if (order !== null) {
    const known = LIST_ORDERS.find((o) => o === order);
    if (!known) throw invalid(`order: '${order.slice(0, 40)}' is not ${LIST_ORDERS.join(' or ')}`);
    query.order = known;
  }
  return query;
}

/**
 * Server-sent events until the job ends: `status` when its status or pending reason changes,
 * `log` for each chunk of output ({stream, data, at}) from `?from` (default: the beginning, as
 * `docker logs -f` shows it; `from=end` for only what comes next),
 * then `end` with the final job fields.
 * An unknown job is still an ordinary 404, since the first poll happens before the stream opens.
 */
async function followLogs(event: H3Event, http: HttpApi, log: Logger): Promise<Response | EventStream> {
  let id: string;
  let reply: LogsReply;
  let limit: number | undefined;
  const poll = async (from: number | 'end', wait: number) =>
    LogsReply.parse(await http.call(ORCHESTRATOR_INBOX, JobBehaviors.logs, { id, from, limit, wait_ms: wait }, FOLLOW_TTL_MS));
  try {
    id = jobIdOf(event);
    const query = logsQuery(event.url.searchParams, true);
    limit = query.limit;
    // Each poll reads on from the offset the last one ended at: the output is never read twice.
    reply = await poll(query.from ?? 0, 0);
  } catch (e) {
    return toWebResponse(errorBody(e, (err, id) => log.error({ err, error_id: id, path: event.url.pathname }, 'request failed')));
  }
  const stream = createEventStream(event);
  let open = true;
  stream.onClosed(() => (open = false));
  void (async () => {
    let shown = '';
    try {
      for (;;) {
        const messages: EventStreamMessage[] = [];
        const state = `${reply.status}|${reply.pending_reason ?? ''}`;
        if (state !== shown) {
          shown = state;
          messages.push({ event: 'status', data: JSON.stringify({ status: reply.status, pending_reason: reply.pending_reason }) });
        }
        for (const chunk of reply.chunks) messages.push({ event: 'log', data: JSON.stringify(chunk) });
        if (reply.done) {
          const { status, exit_code, error } = reply;
          messages.push({ event: 'end', data: JSON.stringify({ id: reply.id, status, exit_code, error }) });
        }
        if (messages.length > 0) await stream.push(messages);
        if (reply.done || !open) break;
        // From where the last answer ended: nothing is read twice. More stored already: no wait.
        reply = await poll(reply.next, reply.more ? 0 : FOLLOW_POLL_MS);
      }
    } catch (e) {
      if (open) await stream.push({ event: 'error', data: JSON.stringify({ error: errorText(e) }) }).catch(() => undefined);
    } finally {
      await stream.close().catch(() => undefined);
    }
  })();
  return stream;
}
