/**
 * The orchestrator's behaviors: the catalogue other nodes, clients and the REST routes call to
 * submit, inspect, cancel and read jobs. Payloads are validated by these schemas before a
 * handler runs; failures answer an error reply (runtime/error-reply.ts).
 */
import { z } from 'zod';
import { callerId } from '../caller-id.js';
import { JobSchema, JobSpecSchema, JobStatusSchema } from './schema.js';

/** Inbox of the orchestrator actor on every node. */
export const ORCHESTRATOR_INBOX = 'orchestrator';

export const JobBehaviors = {
  submit: '/dms/job/submit',
  status: '/dms/job/status',
  list: '/dms/job/list',
  cancel: '/dms/job/cancel',
  logs: '/dms/job/logs',
  /** A job's stored history: every transition with its time and reason. */
  events: '/dms/job/events',
  /** Run a job another node placed here (the deployment actor, on that node's start; this node's own only). */
  accept: '/dms/job/accept',
  /** Resources were freed elsewhere (an allocation released, a bigger share onboarded): try pending jobs again. */
  schedule: '/dms/job/schedule',
} as const;

/** Most jobs one list answers; page with offset beyond it. */
export const MAX_LIST_LIMIT = 1000;
export const DEFAULT_LIST_LIMIT = 100;
/** Longest a logs call may wait for new output; below the default invoke expiry. */
export const MAX_LOGS_WAIT_MS = 20_000;
/** Bytes of stored output one logs call reads unless it asks otherwise, and the most it may ask for. */
export const DEFAULT_LOGS_LIMIT = 1024 * 1024;
export const MAX_LOGS_LIMIT = 8 * 1024 * 1024;

const jobId = callerId('a job id');

export const SubmitPayload = JobSpecSchema;

export const JobIdSchema = jobId;
export const JobIdPayload = z.strictObject({ id: jobId });

export const LIST_ORDERS = ['asc', 'desc'] as const;

/**
 * The most bytes of jobs (as JSON) one list answers with: a page of 1,000 ordinary jobs (about
 * 1 KB each) is an eighth of it, and one of large specs ends early (the total says how many there are).
 */
export const MAX_LIST_BYTES = 8 * 1024 * 1024;

export const ListPayload = z.strictObject({
  status: z.array(JobStatusSchema).optional(),
  limit: z.int().min(1).max(MAX_LIST_LIMIT).default(DEFAULT_LIST_LIMIT),
  offset: z.int().nonnegative().default(0),
  /** By submission time: newest first (what a person looks for), or `asc` for oldest first. */
  order: z.enum(LIST_ORDERS).default('desc'),
});
export type ListPayload = z.input<typeof ListPayload>;

export const CancelPayload = z.strictObject({
  id: jobId,
  /** Recorded as the job's error after "cancelled: ". */
  reason: z.string().min(1).max(500).optional(),
});

/** Where a logs read starts: a byte offset into the job's stored output (a `next` from before), or its current end. */
export const LogsFromSchema = z.union([z.int().nonnegative(), z.literal('end')]);

/** A stored log's identity (its file's inode and birth time): opaque to readers, who pass it back. */
export const LogIdSchema = z.string().regex(/^[0-9]{1,24}\.[0-9]{1,24}$/, { error: 'log: not a log of this node (pass back the log of an answer)' });

export const LogsPayload = z.strictObject({
  id: jobId,
  /** Byte offset to read from (0: the start; 'end': only what comes after this call). */
  from: LogsFromSchema.default(0),
  /** Bytes of stored output to read at most (whole chunks: one longer chunk is still given whole). */
  limit: z.int().min(1).max(MAX_LOGS_LIMIT).default(DEFAULT_LOGS_LIMIT),
  /** When there is nothing after `from` yet and the job has not ended, wait this long for more. */
  wait_ms: z.int().min(0).max(MAX_LOGS_WAIT_MS).default(0),
  /**
   * The output of the job's run before its current (or last) one, kept when the job was placed
   * again (its node lost, or a pinned node back); never waited for, that run has ended.
   */
  previous: z.boolean().default(false),
  /**
   * The `log` of the answer whose `next` is `from`: when the job has run again since, the rest of
   * that run's output comes first (where it is kept, as the previous run's), then the new run's
   * from its start. Without it `from` is an offset into the current run's output.
   */
  log: LogIdSchema.optional(),
});
export type LogsPayload = z.input<typeof LogsPayload>;

export const LogChunkSchema = z.object({
  stream: z.enum(['stdout', 'stderr']),
  data: z.string(),
  at: z.string(),
});

export const LogsReply = z.object({
  id: z.string(),
  status: JobStatusSchema,
  exit_code: z.int().nullable(),
  error: z.string().nullable(),
  pending_reason: z.string().nullable(),
  chunks: z.array(LogChunkSchema),
  /** Byte offset to pass as `from` to continue after these chunks. */
  next: z.int().nonnegative(),
  /** More output is stored beyond `next` already: ask again without waiting. */
  more: z.boolean(),
  /** The job has ended and every chunk of its output has been given. */
  done: z.boolean(),
  /** Which run's stored output `next` is an offset into (pass it back as `log` with `from`); null while there is none. */
  log: z.string().nullable().default(null),
});
export type LogsReply = z.output<typeof LogsReply>;

export const JobListReply = z.object({
  jobs: z.array(JobSchema),
  /** Jobs matching the filter, all pages together: more exist beyond this page when offset + jobs.length < total. */
  total: z.int().nonnegative(),
});
export type JobListReply = z.output<typeof JobListReply>;

/** One stored transition. `from` is null for the event that created the job; equal to `to` for a change without a new status (a pending reason). */
export const JobHistoryEventSchema = z.object({
  at: z.iso.datetime({ offset: true }),
  from: JobStatusSchema.nullable(),
  to: JobStatusSchema,
  reason: z.string(),
});
export const JobEventsReply = z.object({ id: z.string(), events: z.array(JobHistoryEventSchema) });
export type JobEventsReply = z.output<typeof JobEventsReply>;
