/**
 * Dev mode (`dms start --dev`, `general.debug`): `GET /api/v1/dev/stream` streams what the
 * node's actors do as server-sent events (`event: dms`, one DevEvent each, behaviors/dev.ts):
 * every envelope in and out of every actor, every state machine transition, mailbox depth
 * samples, dead letters and lifecycle changes. Outside dev mode the route does not exist (404).
 *
 * A watcher never slows the actors: the kernel only builds events while someone watches, and
 * a watcher that falls behind loses events, which the stream then reports as `dropped`.
 */
import { createHash } from 'node:crypto';
import type * as z from 'zod';
import { DEV_STAGES_PATH, DEV_STREAM_PATH, DevEvent, type DevStreamFilters, DevStreamQuery, matchesFilters, StageFigures } from '../../behaviors/dev.js';
import { DmsError } from '../../runtime/errors.js';
import type { ActorSystem, SystemEvent } from '../../runtime/system.js';
import { decodePayload, type Envelope } from '../../runtime/wire/envelope.js';
import { DEV_PAGE, DEV_PAGE_PATH } from '../dev-page.js';
import { KEEPALIVE, SSE_HEADERS } from '../sse.js';
import type { RouteModule } from './types.js';

/** Watchers at once: with MAX_QUEUED_BYTES each, what they can make the node hold is bounded. */
const MAX_WATCHERS = 16;
/** The bytes a slow watcher may lag behind (past what the sockets hold) before the stream drops events instead of buffering. */
const MAX_QUEUED_BYTES = 4 * 1024 * 1024;
/** The most a watcher waits for an event: short enough to read as live. */
const FLUSH_MS = 25;
const FLUSH_BYTES = 64 * 1024;
/** How often each actor's mailbox depth is sampled while someone watches. */
const MAILBOX_SAMPLE_MS = 1000;

/** What the page may do: run its own inline script and style, read this node, be framed by nobody. */
const DEV_PAGE_CSP = [
  "default-src 'none'",
  `script-src '${hashOf(/<script>([\s\S]*)<\/script>/)}'`,
  `style-src '${hashOf(/<style>([\s\S]*)<\/style>/)}'`,
  "connect-src 'self'",
  "frame-ancestors 'none'",
].join('; ');

function hashOf(part: RegExp): string {
  return `sha256-${createHash('sha256').update(part.exec(DEV_PAGE)![1], 'utf8').digest('base64')}`;
}

const devModeOff = (path: string) => new DmsError('not_found', `no route GET ${path}: dev mode is off (start the node with --dev)`);

export const devRoutes: RouteModule = ({ table, config, system, stages }) => {
  let watchers = 0;
  table.add({
    method: 'GET',
    path: DEV_PAGE_PATH,
    operationId: 'getDevPage',
    summary: 'The dev page: actors, live messages, state timelines',
    description: 'Dev mode only (`dms start --dev`); reads the dev stream from the browser. Admin role.',
    tags: ['dev'],
    responses: {
      200: { description: 'the page', content: { 'text/html': { description: 'one self-contained HTML document' } } },
      404: { description: 'dev mode is off' },
    },
    handler: () => {
      if (!config.general.debug) throw devModeOff(DEV_PAGE_PATH);
      return new Response(DEV_PAGE, {
        headers: { 'content-type': 'text/html; charset=utf-8', 'content-security-policy': DEV_PAGE_CSP, 'x-content-type-options': 'nosniff', 'cache-control': 'no-store' },
      });
    },
  });

  table.add({
    method: 'GET',
    path: DEV_STREAM_PATH,
    operationId: 'watchDevStream',
    summary: "Every envelope, state transition and mailbox depth of the node's actors, live",
    description:
      'Dev mode only. Filters take comma-separated lists; an event passes when every filter given matches. Payloads appear only when the node runs with `--dev-payloads`. A watcher that falls behind is sent `dropped` with the count it missed. Admin role.',
    tags: ['dev'],
    query: DevStreamQuery,
    responses: {
      200: { description: 'the stream', content: { 'text/event-stream': { description: 'one `dms` event per item, its data a DevEvent', events: { dms: DevEvent } } } },
      400: { description: 'a filter that is not a list of names, or an unknown event type' },
      404: { description: 'dev mode is off' },
      503: { description: `as many watchers as the stream takes (${MAX_WATCHERS}) are watching; Retry-After says when to try again` },
    },
    handler: (_event, input) => {
      if (!config.general.debug) throw devModeOff(DEV_STREAM_PATH);
      const filters = input.query();
      if (watchers >= MAX_WATCHERS) {
        throw new DmsError('overloaded', `the dev stream has ${MAX_WATCHERS} watchers, as many as it takes; close one or retry later`, { retryAfter: 5 });
      }
      watchers++;
      return watch(system, filters, config.general.dev_payloads, config.rest.sse_keepalive_s * 1000, () => watchers--);
    },
  });

  const stagesOff = (method: string) =>
    new DmsError('not_found', `no route ${method} ${DEV_STAGES_PATH}: stage timings are off (general.stage_timings, DMS_STAGE_TIMINGS=1)`);
  table.add({
    method: 'GET',
    path: DEV_STAGES_PATH,
    operationId: 'getStageTimings',
    summary: 'Where envelopes spent their time, stage by stage',
    description:
      'Only with `general.stage_timings` on (env `DMS_STAGE_TIMINGS=1`): count, mean, p50 and p99 of each stage of the envelope path (REST admission, network send, parse, signature check, mailbox wait, handler, reply signing, the round trip to another node and the time a peer took to serve it) since start or the last reset. Admin role.',
    tags: ['dev'],
    responses: {
      200: { description: 'the stages timed so far', schema: StageFigures },
      404: { description: 'stage timings are off' },
    },
    handler: (): z.output<typeof StageFigures> => {
      if (!stages) throw stagesOff('GET');
      return stages.snapshot();
    },
  });
  table.add({
    method: 'DELETE',
    path: DEV_STAGES_PATH,
    operationId: 'resetStageTimings',
    summary: 'Starts the stage timings afresh',
    description: 'Only with `general.stage_timings` on. Admin role.',
    tags: ['dev'],
    responses: {
      204: { description: 'reset' },
      404: { description: 'stage timings are off' },
    },
    handler: () => {
      if (!stages) throw stagesOff('DELETE');
      stages.reset();
      return new Response(null, { status: 204 });
    },
  });
};

/**
 * The stream, written by hand rather than with h3's EventStream: every event here is one line
 * of JSON (JSON.stringify escapes line breaks), so an SSE frame is two fixed strings around it,
 * where the general formatter splits each event into lines with a regular expression.
 */
function watch(system: ActorSystem, filters: DevStreamFilters, payloads: boolean, keepaliveMs: number, onClosed: () => void): Response {
  // Events go out in batches, one chunk each, every FLUSH_MS or sooner when FLUSH_BYTES have
  // gathered: a chunk is a stream read, a syscall and a wake-up of the watcher, which under
  // load cost the node and the watcher more than building the events does.
  let batch = '';
  let timer: NodeJS.Timeout | undefined;
  let dropped = 0;
  let closed = false;
  const encoder = new TextEncoder();
  let controller!: ReadableStreamDefaultController<Uint8Array>;
  const body = new ReadableStream<Uint8Array>(
    {
      // Written once subscribed: a watcher that has read it misses nothing that happens after.
      start: (c) => {
        controller = c;
        c.enqueue(encoder.encode(': dms dev stream\n\n'));
      },
      // The watcher read and nothing waits: say what was lost now, not only when the next event comes.
      pull: (c) => {
        if (c.desiredSize === MAX_QUEUED_BYTES && batch === '') reportDropped();
      },
      cancel: () => close(),
    },
    new ByteLengthQueuingStrategy({ highWaterMark: MAX_QUEUED_BYTES }),
  );
  let wrote = Date.now();
  const flush = () => {
    clearTimeout(timer);
    timer = undefined;
    if (closed || batch === '') return;
    const chunk = encoder.encode(batch);
    batch = '';
    controller.enqueue(chunk);
    wrote = Date.now();
  };
  /** Bytes written and not yet taken by the connection, and gathered for the next chunk. */
  const queued = () => MAX_QUEUED_BYTES - (controller.desiredSize ?? 0) + batch.length;
  const push = (json: string) => {
    batch += `event: dms\ndata: ${json}\n\n`;
    if (batch.length >= FLUSH_BYTES) flush();
    else timer ??= setTimeout(flush, FLUSH_MS);
  };
  const reportDropped = () => {
    if (dropped === 0) return;
    const count = dropped;
    dropped = 0;
    push(JSON.stringify({ type: 'dropped', at: new Date().toISOString(), count } satisfies DevEvent));
  };
  /** Whether there is room for one more event; counts it as dropped when not. */
  const room = () => {
    if (closed) return false;
    if (queued() >= MAX_QUEUED_BYTES) {
      dropped++;
      return false;
    }
    reportDropped();
    return true;
  };
  const send = (e: DevEvent | null) => {
    if (e && matchesFilters(e, filters) && room()) push(JSON.stringify(e));
  };
  const now = clock();
  const sub = system.events.subscribe((e) => {
    // Envelopes are most of the stream (four per REST invoke): written straight to JSON,
    // without the intermediate event object, as devEvent would make it.
    if ((e.type === 'deliver' || e.type === 'send') && !payloads) {
      if (matchesFilters({ type: 'envelope', actor: e.actor, behavior: e.env.be, topic: e.env.opt.topic }, filters) && room()) push(envelopeEventJson(e, now()));
      return;
    }
    send(devEvent(e, payloads, now()));
  });
  const sampler = setInterval(() => {
    for (const e of mailboxSamples(system)) send(e);
    // A watcher whose filters leave nothing of a quiet node is still told the stream is alive.
    if (batch === '' && Date.now() - wrote >= keepaliveMs && queued() < MAX_QUEUED_BYTES) {
      controller.enqueue(encoder.encode(KEEPALIVE));
      wrote = Date.now();
    }
  }, MAILBOX_SAMPLE_MS);
  function close() {
    if (closed) return;
    closed = true;
    clearInterval(sampler);
    clearTimeout(timer);
    sub.unsubscribe();
    onClosed();
  }
  return new Response(body, { headers: SSE_HEADERS });
}

/** The time as RFC 3339, made once per millisecond: many events share one. */
function clock(): () => string {
  let lastMs = 0;
  let lastIso = '';
  return () => {
    const ms = Date.now();
    if (ms !== lastMs) {
      lastMs = ms;
      lastIso = new Date(ms).toISOString();
    }
    return lastIso;
  };
}

function mailboxSamples(system: ActorSystem): DevEvent[] {
  const at = new Date().toISOString();
  return system.listActors().map((a) => ({ type: 'mailbox', at, actor: a.name, ...a.load }));
}

/** A kernel event as the stream shows it; null for what the stream does not show. */
export function devEvent(e: SystemEvent, payloads: boolean, at: string): DevEvent | null {
  switch (e.type) {
    case 'deliver':
      return { ...envelopeFields(e.env, payloads), type: 'envelope', at, direction: 'in', actor: e.actor, verified: e.verified, reply_ms: e.replyMs };
    case 'send':
      return { ...envelopeFields(e.env, payloads), type: 'envelope', at, direction: 'out', actor: e.actor };
    case 'dead-letter': {
      const { behavior, from, to, nonce } = envelopeFields(e.env, false);
      return { type: 'dead-letter', at, behavior, from, to, nonce, reason: e.reason };
    }
    case 'transition':
      return { type: 'transition', at, actor: e.actor, machine: e.machine, ...(e.instance ? { instance: e.instance } : {}), from: e.from, to: e.to, event: e.event };
    case 'lifecycle':
      return { type: 'lifecycle', at, actor: e.actor, state: e.state };
  }
}

type EnvelopeEvent = Extract<SystemEvent, { type: 'deliver' | 'send' }>;

const q = JSON.stringify;

/** JSON.stringify(devEvent(e, false, at)), byte for byte (test/unit/dev-events.test.ts holds it to that). */
export function envelopeEventJson(e: EnvelopeEvent, at: string): string {
  const { env } = e;
  const topic = env.opt.topic ? `,"topic":${q(env.opt.topic)}` : '';
  const head =
    `{"behavior":${q(env.be)},"from":{"host":${q(env.from.addr.host)},"inbox":${q(env.from.addr.inbox)},"did":${q(env.from.did)}},` +
    `"to":{"host":${q(env.to.addr.host)},"inbox":${q(env.to.addr.inbox)}}${topic},"nonce":"${env.nonce}","size":${env.msg.length},` +
    `"type":"envelope","at":"${at}"`;
  if (e.type === 'send') return `${head},"direction":"out","actor":${q(e.actor)}}`;
  const verified = e.verified === undefined ? '' : `,"verified":${q(e.verified)}`;
  const reply = e.replyMs === undefined ? '' : `,"reply_ms":${q(e.replyMs)}`;
  return `${head},"direction":"in","actor":${q(e.actor)}${verified}${reply}}`;
}

function envelopeFields(env: Envelope, payloads: boolean) {
  return {
    behavior: env.be,
    from: { host: env.from.addr.host, inbox: env.from.addr.inbox, did: env.from.did },
    to: { host: env.to.addr.host, inbox: env.to.addr.inbox },
    ...(env.opt.topic ? { topic: env.opt.topic } : {}),
    nonce: String(env.nonce),
    size: env.msg.length,
    ...(payloads ? { payload: payloadOf(env.msg) } : {}),
  };
}

/** The payload as JSON, or what it is when it is not JSON (binary payloads exist). */
function payloadOf(msg: Uint8Array): unknown {
  try {
    return decodePayload(msg);
  } catch {
    return { binary_bytes: msg.length };
  }
}
