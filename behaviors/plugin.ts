/**
 * The plugin API, published as `dms/plugin` (package.json `exports`). A plugin is an ES module
 * whose default export is made with `definePlugin`: it declares behaviors (run by one actor
 * whose inbox is the plugin's name), executors (each an actor at `executor/<name>`, chosen by
 * jobs with `executor: "<name>"`), REST routes (under `/api/v1/plugins/<name>/…`, documented in
 * the OpenAPI document) and start/stop hooks. Everything a plugin does goes through the scoped
 * context it is handed (PluginContext): its logger, its config section, and envelopes to other
 * actors. It never sees the node's ActorSystem.
 *
 *   import { definePlugin, z } from 'dms/plugin';
 *   export default definePlugin({
 *     name: 'greeter',
 *     behaviors: [{
 *       name: '/plugin/greeter/hello',
 *       payload: z.object({ name: z.string() }),
 *       handle: ({ payload, ctx }) => ({ greeting: `${ctx.config.greeting ?? 'hello'}, ${payload.name}` }),
 *     }],
 *   });
 */
import * as z from 'zod';
import type { MachineFactory, RunMachine, RunPhase } from './jobs/run-machine.js';
import type { ExecutorImplementation, ExitResult, LogChunk, LogPage } from './jobs/execution.js';
import type { H3Event } from 'h3';
import type { BodyDoc, Method, ParamDoc, ResponseDoc, RouteInput } from './route-docs.js';
import type { Logger } from '../runtime/log.js';
import type { Envelope, Handle } from '../runtime/wire/envelope.js';

// The same zod and errors the node uses: a schema made with this `z` words its errors like the
// node's own, and a DmsError thrown by a handler reaches the caller with its text and kind.
export { z };
export { DmsError, invalid, notFound } from '../runtime/errors.js';
export type { ErrorKind } from '../runtime/errors.js';
export type { Envelope, Handle, Logger };
export type { Executor, ExecutionHandle, ExitResult, LogChunk, LogPage, ReconcileReport, StartOptions } from './jobs/execution.js';
export type { Job } from '../behaviors/jobs/schema.js';
export type { RunMachine, RunPhase };

/** Where an envelope goes: a handle, or the inbox of an actor of this node (`'orchestrator'`). */
export type Target = Handle | string;

export interface CallOptions {
  /** How long the envelope lives (and an invoke waits for its reply); default 30 s. */
  ttlMs?: number;
}

/** What a plugin is given: scoped to it, never the node itself. */
export interface PluginContext {
  /** The plugin's name (its actor's inbox). */
  readonly name: string;
  /** A logger whose lines name the plugin. */
  readonly log: Logger;
  /** Its section of the node config: `plugins.config.<name>`, `{}` when absent. */
  readonly config: Readonly<Record<string, unknown>>;
  /** The handle of the plugin's actor (replies and other actors reach it here). */
  readonly self: Handle;
  /** The handle of `inbox` on this node, or on the peer `host` (a peer id). */
  handle(inbox: string, host?: string): Handle;
  /** Invokes `be` on `to` from the plugin's actor; resolves with the reply's payload, an error reply is thrown as its DmsError. */
  invoke<T = unknown>(to: Target, be: string, payload: unknown, opts?: CallOptions): Promise<T>;
  /** Sends `be` to `to` without waiting for an answer. */
  send(to: Target, be: string, payload: unknown, opts?: CallOptions): Promise<void>;
}

/** What a plugin behavior's handler sees. */
export interface PluginBehaviorContext<P> {
  /** The payload, checked against the behavior's schema. */
  payload: P;
  /** The envelope as it came, verified and capability-checked by the node. */
  env: Envelope;
  ctx: PluginContext;
}

/** Anything with zod's `safeParse`: a zod schema (from `dms/plugin` or the plugin's own zod 4). */
export type PayloadSchema<P> = z.ZodType<P>;

export interface PluginBehavior<P = any, R = unknown> {
  /** `/`-separated path, e.g. `/plugin/greeter/hello`; `/public/…` needs no capability. */
  name: string;
  /** The capability a caller needs (docs/CAPABILITIES.md); default the behavior's name. */
  capability?: string;
  /** Schema of the JSON payload: a payload failing it gets an error reply naming the field. Absent: any JSON value. */
  payload?: PayloadSchema<P>;
  description?: string;
  /** Its result is the reply; a thrown DmsError replies with its text and kind, anything else as `internal`. */
  handle(c: PluginBehaviorContext<P>): R | Promise<R>;
}

/** Where a plugin executor keeps a job's output: the node's job log directory, read by `GET /api/v1/jobs/:id/logs`. */
export interface PluginLogStore {
  /** Starts the job's log; append chunks, then close() before reporting the run's end. */
  create(jobId: string): Promise<{ append(stream: LogChunk['stream'], data: string): void; close(): Promise<void> }>;
  /** A page; with `log` (a page's), the rest of a log since replaced first (Executor.readLogs). */
  readPage(jobId: string, from: number, limit: number, log?: string): Promise<LogPage>;
  waitBeyond(jobId: string, from: number, signal: AbortSignal): Promise<boolean>;
  /** Keeps what an earlier run of the job wrote as its previous run's: call it in `start` before `create`. */
  retire(jobId: string): Promise<void>;
  /** A page of the job's previous run's output, null when none is kept (Executor.readPreviousLogs). */
  readPreviousPage(jobId: string, from: number, limit: number): Promise<LogPage | null>;
}

/** What an executor's factory is given besides the plugin context. */
export interface ExecutorContext extends PluginContext {
  /** The node's store of job output. */
  logs: PluginLogStore;
  /**
   * A run's machine (id `executor-run`, actor `executor/<name>`), observed by the node: send it
   * `created`, `exited`, `failed`, `cancel`, `stopped` as the run goes (actors/executors/run-machine.ts).
   */
  newRun(jobId: string, phase?: RunPhase): RunMachine;
  /** The run's result once its machine has ended; rejects with the reason when it ended without one. */
  endOf(run: RunMachine): Promise<ExitResult>;
  /** Runs `fn` on behalf of job `jobId`: an uncaught fault there fails that job, not the node. */
  jobScope<T>(jobId: string, fn: () => T): T;
}

export interface PluginExecutor {
  /** Lower-case name: jobs choose it with `executor: "<name>"`; its actor is `executor/<name>`. */
  name: string;
  /** Makes the implementation, whose `name` must be this name. `open`/`close` run with its actor. */
  create(ctx: ExecutorContext): ExecutorImplementation;
}

export interface PluginRoute {
  method: Method;
  /** Below `/api/v1/plugins/<plugin>`, h3's form: `/hello/:who`. */
  path: string;
  /** Unique within the plugin; the document's operationId is `plugin_<plugin>_<operationId>`. */
  operationId: string;
  summary: string;
  description?: string;
  params?: Record<string, ParamDoc>;
  query?: z.ZodType;
  body?: BodyDoc;
  /** Answers by status; default `200: ok`. */
  responses?: Record<number, ResponseDoc>;
  /** A value is answered as JSON, a thrown DmsError as `{"error"}` with its status. */
  handler(event: H3Event, input: RouteInput<any, any, any>, ctx: PluginContext): unknown;
}

export interface PluginDefinition {
  /** Lower-case letters, digits and dashes; the inbox of the plugin's actor. */
  name: string;
  behaviors?: PluginBehavior<any, any>[];
  executors?: PluginExecutor[];
  routes?: PluginRoute[];
  /** Broadcast topics the plugin's actor subscribes to. */
  topics?: string[];
  /** Envelopes its actor handles at once; default the node's `actor.mailbox_concurrency`. */
  concurrency?: number;
  /** Once its actor runs (after the node's jobs part): a throw stops start-up. */
  start?(ctx: PluginContext): Promise<void> | void;
  /** At shutdown, before its actor stops. */
  stop?(ctx: PluginContext): Promise<void> | void;
}

const DEFINED = Symbol.for('dms.plugin');

/** Marks a plugin definition: its handlers get the plugin context rather than the kernel's. */
export function definePlugin<const D extends PluginDefinition>(def: D): D {
  return Object.assign(def, { [DEFINED]: true });
}

export const isDefinedPlugin = (p: unknown): p is PluginDefinition => typeof p === 'object' && p !== null && (p as { [DEFINED]?: boolean })[DEFINED] === true;

const NAME = /^[a-z0-9][a-z0-9-]{0,62}$/;
const MAX_TOPICS = 8;
const MAX_TOPIC_LENGTH = 256;
const fn = (what: string) => z.custom<(...a: unknown[]) => unknown>((v) => typeof v === 'function', { error: `${what} must be a function` });
const schemaLike = z.custom<z.ZodType>((v) => typeof (v as { safeParse?: unknown } | null)?.safeParse === 'function', {
  error: 'payload must be a schema with safeParse (z from dms/plugin)',
});

/** The shape a loaded module must have; checked so a broken plugin fails start-up with a reason. */
export const PluginShape = z
  .object({
    name: z.string().regex(NAME, { error: 'name must be lower-case letters, digits and dashes' }),
    behaviors: z
      .array(
        z
          .object({
            name: z.string().regex(/^\/\S+$/, { error: 'behavior name must be a /-separated path' }),
            capability: z.string().optional(),
            payload: schemaLike.optional(),
            handle: fn('handle'),
          })
          .loose(),
      )
      .optional(),
    executors: z.array(z.object({ name: z.string().regex(NAME, { error: 'executor name must be lower-case letters, digits and dashes' }), create: fn('create') })).optional(),
    routes: z
      .array(
        z
          .object({
            method: z.enum(['GET', 'POST', 'PUT', 'PATCH', 'DELETE']),
            path: z.string().regex(/^(\/[A-Za-z0-9_.:-]+)+$|^\/$/, { error: 'route path must start with / and hold only path segments' }),
            operationId: z.string().regex(/^[A-Za-z][A-Za-z0-9_]*$/, { error: 'operationId must be an identifier' }),
            summary: z.string().min(1),
            handler: fn('handler'),
          })
          .loose(),
      )
      .optional(),
    // Peers hold only a few of a node's topics (host.ts, GOSSIP_TOPIC_BYTES_PER_PEER): past
    // that, its subscriptions would be dropped without a word and its broadcasts not reach it.
    topics: z
      .array(z.string().min(1).max(MAX_TOPIC_LENGTH, { error: `a topic is at most ${MAX_TOPIC_LENGTH} characters` }))
      .max(MAX_TOPICS, { error: `a plugin subscribes to at most ${MAX_TOPICS} topics` })
      .optional(),
    concurrency: z.int().min(1).max(1024).optional(),
    start: fn('start').optional(),
    stop: fn('stop').optional(),
  })
  .refine((p) => (p.behaviors?.length ?? 0) + (p.executors?.length ?? 0) + (p.routes?.length ?? 0) > 0, {
    error: 'a plugin needs at least one behavior, executor or route',
  });
