/**
 * The dev stream's contract (`GET /api/v1/dev/stream`, dev mode only): what a watcher sees of
 * the node's actors, one server-sent event `dms` per item. The node, `client/` and `dms dev
 * watch` all read these types; the OpenAPI document describes the stream from these schemas.
 */
import * as z from 'zod';
import { STAGES } from '../runtime/stage-timings.js';

export const DEV_STREAM_PATH = '/api/v1/dev/stream';

export const DEV_EVENT_TYPES = ['envelope', 'transition', 'mailbox', 'dead-letter', 'lifecycle', 'dropped'] as const;
export type DevEventType = (typeof DEV_EVENT_TYPES)[number];

/** How an envelope was found trustworthy where it entered the node. */
export const VERIFICATIONS = ['signature', 'validator', 'node', 'local'] as const;
export type Verification = (typeof VERIFICATIONS)[number];

const Address = z.object({ host: z.string(), inbox: z.string() });

const at = z.string().describe('when the node saw it (RFC 3339)');

export const DevEnvelopeEvent = z.object({
  type: z.literal('envelope'),
  at,
  /** `in`: delivered to the actor; `out`: sent by it. */
  direction: z.enum(['in', 'out']),
  actor: z.string(),
  behavior: z.string(),
  from: Address.extend({ did: z.string() }),
  to: Address,
  topic: z.string().optional(),
  /** uint64 as a decimal string: browsers parse JSON numbers as doubles. */
  nonce: z.string(),
  /** Payload bytes. */
  size: z.number().int(),
  /**
   * `signature`: checked where it entered; `validator`: checked by the gossip topic validator;
   * `node`: signed by this node for a trusted local REST caller; `local`: from an actor of this node.
   */
  verified: z.enum(VERIFICATIONS).optional(),
  /** For a reply taken by a waiting invoke or broadcast: ms since the request was sent. */
  reply_ms: z.number().optional(),
  /** The payload as JSON: only when the node runs with `--dev-payloads` (payloads may hold secrets). */
  payload: z.unknown().optional(),
});

export const DevTransitionEvent = z.object({
  type: z.literal('transition'),
  at,
  /** The actor whose machine it is (`orchestrator` for job machines, `executor/docker` for runs…). */
  actor: z.string(),
  /** The machine's id: `job`, `executor-run`, `peer`, `actor-lifecycle`… */
  machine: z.string(),
  /** Which one of its kind, when its owner names it (a job id, a peer id). */
  instance: z.string().optional(),
  /** The top-level states it left and entered. */
  from: z.string(),
  to: z.string(),
  /** The full dotted paths (`pending.offering`), when the state is nested: a move within `pending` has from = to. */
  from_path: z.string().optional(),
  to_path: z.string().optional(),
  event: z.string(),
});

export const DevMailboxEvent = z.object({
  type: z.literal('mailbox'),
  at,
  actor: z.string(),
  /** Envelopes waiting or in progress. */
  depth: z.number().int(),
  capacity: z.number().int(),
});

/** An envelope no actor took: no such inbox or behavior, expired while queued, a reply nobody waits for… */
export const DevDeadLetterEvent = z.object({
  type: z.literal('dead-letter'),
  at,
  behavior: z.string(),
  from: Address.extend({ did: z.string() }),
  to: Address,
  nonce: z.string(),
  reason: z.string(),
});

export const DevLifecycleEvent = z.object({ type: z.literal('lifecycle'), at, actor: z.string(), state: z.string() });

/** The watcher fell behind: `count` events were left out since the previous event. */
export const DevDroppedEvent = z.object({ type: z.literal('dropped'), at, count: z.number().int() });

export const DevEvent = z.discriminatedUnion('type', [
  DevEnvelopeEvent,
  DevTransitionEvent,
  DevMailboxEvent,
  DevDeadLetterEvent,
  DevLifecycleEvent,
  DevDroppedEvent,
]);
export type DevEvent = z.infer<typeof DevEvent>;

const list = <T extends z.ZodType<unknown, string>>(item: T) =>
  z
    .string()
    .transform((s) => s.split(',').map((x) => x.trim()).filter(Boolean))
    // An empty list matched no event: a watcher that sent `?type=` saw nothing, and was not told why.
    .pipe(z.array(item).min(1, 'names nothing: leave the parameter out to see every event').max(32));

/** Filters of the stream, as query parameters; each takes a comma-separated list, any of which matches. */
export const DevStreamQuery = z.object({
  actor: list(z.string().min(1).max(200)).optional(),
  behavior: list(z.string().min(1).max(500)).optional(),
  topic: list(z.string().min(1).max(500)).optional(),
  type: list(z.enum(DEV_EVENT_TYPES)).optional(),
});
export type DevStreamFilters = z.infer<typeof DevStreamQuery>;

/** What the filters look at: an event, or the fields of one not made yet. */
export interface FilteredFields {
  type: DevEventType;
  actor?: string;
  behavior?: string;
  topic?: string;
}

/** Whether an event passes: each filter given must match, and one that does not apply to the event's type excludes it. */
export function matchesFilters(e: FilteredFields, f: DevStreamFilters): boolean {
  // A watcher is always told what it missed.
  if (e.type === 'dropped') return true;
  if (f.type && !f.type.includes(e.type)) return false;
  if (f.actor && !(e.actor !== undefined && f.actor.includes(e.actor))) return false;
  if (f.behavior && !(e.behavior !== undefined && f.behavior.includes(e.behavior))) return false;
  if (f.topic && !(e.type === 'envelope' && e.topic !== undefined && f.topic.includes(e.topic))) return false;
  return true;
}

/** `GET /api/v1/dev/stages`: where envelopes' time went, stage by stage (runtime/stage-timings.ts). */
export const DEV_STAGES_PATH = '/api/v1/dev/stages';
export const StageFigures = z
  .array(
    z.object({
      stage: z.enum(STAGES),
      count: z.number().int().meta({ description: 'times timed since the node started or the last reset' }),
      mean_ms: z.number(),
      p50_ms: z.number().meta({ description: 'over the latest 8192 of them, as p99_ms' }),
      p99_ms: z.number(),
    }),
  )
  .meta({ description: 'one entry per stage timed, in the order an envelope passes them' });
