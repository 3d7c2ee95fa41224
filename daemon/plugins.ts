/**
 * Loading plugins (behaviors/plugin.ts is their API) and making their parts the node's own
 * components: the plugin's actor (its behaviors, start/stop hooks), one executor actor per
 * executor it brings (defineExecutor, like Docker's and null's), and its REST routes in the
 * route table. Every check runs before anything of a plugin starts, and every failure stops
 * start-up with a message naming the plugin (`plugins.modules: '<spec>' …`).
 */
import { DEPLOYMENT_INBOX } from '../behaviors/jobs/deployment.js';
import { FORWARDS_INBOX } from '../behaviors/jobs/forwards.js';
import { ENSEMBLE_INBOX, ENSEMBLE_NET_INBOX } from '../behaviors/ensembles/schema.js';
import { existsSync } from 'node:fs';
import { register } from 'node:module';
import { isAbsolute, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { z } from 'zod';
import { DISCOVERY_INBOX } from '../actors/discovery.js';
import { defineExecutor, type ExecutorActorDeps } from '../actors/executors/actor.js';
import { JobLogs } from '../actors/executors/logfile.js';
import { endOf, newRun } from '../behaviors/jobs/run-machine.js';
import { ROOT_INBOX } from '../actors/root.js';
import { ORCHESTRATOR_INBOX } from '../behaviors/jobs/jobs.js';
import { RESOURCES_INBOX } from '../behaviors/jobs/resources.js';
import {
  isDefinedPlugin,
  type PluginContext,
  type PluginDefinition,
  type PluginExecutor,
  PluginShape,
  type Target,
} from '../behaviors/plugin.js';
import { HTTP_INBOX } from '../http/actor.js';
import type { RouteModule } from '../http/routes/types.js';
import type { Actor } from '../runtime/actor.js';
import { FaultGuard } from '../runtime/fault-guard.js';
import type { Behavior } from '../runtime/behavior.js';
import { type ActorContext, type ActorDefinition, defineActor } from '../runtime/component.js';
import { importModule } from '../runtime/code-cache.js';
import { settledWithin } from '../runtime/deadline.js';
import { DmsError, errorText } from '../runtime/errors.js';
import { describeIssues } from '../runtime/issues.js';
import type { Logger } from '../runtime/log.js';
import { at } from '../runtime/wire/envelope.js';

const isPath = (spec: string) => spec.startsWith('.') || isAbsolute(spec);
/**
 * Topics all plugins together may subscribe to: with the node's own two, each up to 256
 * characters, within what a peer holds of one node's topics (GOSSIP_TOPIC_BYTES_PER_PEER).
 */
const PLUGIN_TOPICS_PER_NODE = 16;

/** The inboxes of the node's own actors: no plugin may take one. */
export const BUILTIN_INBOXES = [ROOT_INBOX, DISCOVERY_INBOX, HTTP_INBOX, ORCHESTRATOR_INBOX, RESOURCES_INBOX, DEPLOYMENT_INBOX, ENSEMBLE_INBOX, ENSEMBLE_NET_INBOX, FORWARDS_INBOX] as const;

/** A plugin module, loaded and checked. */
export interface LoadedPlugin {
  /** As `plugins.modules` lists it: what messages name. */
  spec: string;
  plugin: PluginDefinition;
  /** Its section of `plugins.config`. */
  config: Record<string, unknown>;
  /** How long its start hook may take (`plugins.load_timeout_s`), ms. */
  timeoutMs: number;
}

export interface Reserved {
  /** Inboxes bound or to be bound by the node's own actors. */
  inboxes: readonly string[];
  /** The node's own executors. */
  executors: readonly string[];
}

const refused = (spec: string, problem: string) => new DmsError('invalid', `plugins.modules: '${spec}' ${problem}`);

/**
 * A plugin's load or start that never settles may be all the process waits on: its bound keeps
 * the process up, so the node refuses it by name instead of Node exiting 13 without a word.
 */
const KEEP_ALIVE = { unref: false };

const tooSlow = (ms: number) => `within ${ms / 1000} s (plugins.load_timeout_s)`;

/** Imports each plugin module and checks it and its names; any failure stops start-up naming the plugin. */
export async function loadPlugins(
  modules: string[],
  home: string,
  reserved: Reserved,
  configs: Record<string, Record<string, unknown>> = {},
  timeoutMs = 20_000,
): Promise<LoadedPlugin[]> {
  const loaded: LoadedPlugin[] = [];
  if (modules.length > 0) resolvePluginApiHere();
  const executors = new Map<string, string>(reserved.executors.map((e) => [e, 'a built-in executor']));
  const topics = new Set<string>();
  for (const spec of modules) {
    const target = isPath(spec) ? pathToFileURL(resolve(home, spec)).href : spec;
    let mod: { default?: unknown };
    let late: DmsError | undefined;
    try {
      mod = (await settledWithin(importModule(target), timeoutMs, () => {
        throw (late = refused(spec, `did not load ${tooSlow(timeoutMs)}`));
      }, KEEP_ALIVE)) as { default?: unknown };
    } catch (e) {
      if (e === late) throw e;
      throw new DmsError('invalid', `plugins.modules: cannot load '${spec}' (${(e as Error).message})`);
    }
    const check = PluginShape.safeParse(mod.default);
    if (!check.success) throw refused(spec, `is not a DMS plugin: ${describeIssues(check.error)}`);
    // A bare object is the first plugin shape, whose handlers were handed the kernel's actor: run
    // as a definition its handlers would get other arguments than they were written for.
    if (!isDefinedPlugin(mod.default)) throw refused(spec, "is not a DMS plugin: make its default export with definePlugin from 'dms/plugin'");
    const plugin = mod.default;
    const { name } = plugin;
    const owner = reserved.inboxes.includes(name) ? 'the built-in actor of that inbox' : loaded.find((p) => p.plugin.name === name)?.spec;
    if (owner) throw refused(spec, `uses the name '${name}', already taken by ${owner.startsWith('the ') ? owner : `'${owner}'`}`);
    for (const ex of plugin.executors ?? []) {
      const by = executors.get(ex.name);
      if (by) throw refused(spec, `declares the executor '${ex.name}', already taken by ${by}`);
      executors.set(ex.name, `'${spec}'`);
    }
    duplicates(spec, 'behavior', (plugin.behaviors ?? []).map((b) => b.name));
    duplicates(spec, 'route', (plugin.routes ?? []).map((r) => `${r.method} ${r.path}`));
    duplicates(spec, 'route operationId', (plugin.routes ?? []).map((r) => r.operationId));
    for (const t of plugin.topics ?? []) topics.add(t);
    if (topics.size > PLUGIN_TOPICS_PER_NODE) throw refused(spec, `takes the node's plugins past ${PLUGIN_TOPICS_PER_NODE} topics together (peers hold only a few of a node's topics)`);
    loaded.push({ spec, plugin, config: configs[name] ?? {}, timeoutMs });
  }
  return loaded;
}

let apiResolved = false;

/**
 * From now on `import 'dms/plugin'` anywhere in this process is this node's plugin API (./plugin-api-resolve.ts).
 * Run from its TypeScript sources (a node embedded in a TypeScript runner: tsx, vitest), the
 * hook has no JavaScript file for Node to load; that runner resolves `dms/plugin` itself and is
 * configured to (vitest.config.ts).
 */
function resolvePluginApiHere(): void {
  if (apiResolved) return;
  apiResolved = true;
  // Relative to dist/ rather than to this file's own folder: in the build this code sits in
  // dist/lib/dms.cjs (scripts/bundle.mjs), one folder below dist/ like daemon/.
  const hook = new URL('../daemon/plugin-api-resolve.js', import.meta.url);
  if (!existsSync(hook)) return;
  register(hook, { data: { api: new URL('../behaviors/plugin.js', import.meta.url).href } });
}

function duplicates(spec: string, what: string, names: string[]): void {
  const twice = names.find((n, i) => names.indexOf(n) !== i);
  if (twice) throw refused(spec, `declares the ${what} '${twice}' twice`);
}

/** The plugin context of an actor: envelopes from it, its logger, the plugin's config. */
function pluginContext(name: string, actor: Actor, log: Logger, config: Record<string, unknown>): PluginContext {
  const handle = (inbox: string, host?: string) => (host ? at(inbox, host) : actor.local(inbox));
  const to = (t: Target) => (typeof t === 'string' ? handle(t) : t);
  return {
    name,
    log,
    config: Object.freeze({ ...config }),
    get self() {
      return actor.handle;
    },
    handle,
    invoke: <T>(t: Target, be: string, payload: unknown, opts: { ttlMs?: number } = {}) =>
      seen(actor.call(to(t), be, payload, z.unknown(), opts) as Promise<T>, log, 'invoke', be),
    send: (t, be, payload, opts = {}) => seen(actor.tell(to(t), be, payload, opts), log, 'send', be),
  };
}

/**
 * `sent`, with its failure logged when nobody waits for it. A plugin that sends without awaiting
 * (`ctx.send` reads as fire-and-forget) left a refusal (an unknown inbox, a full mailbox) as an
 * unhandled rejection, which ends the node's process; through a /public behavior anyone could end
 * it. The promise returned is the same one: a plugin that awaits it still gets the error.
 */
function seen<T>(sent: Promise<T>, log: Logger, what: 'send' | 'invoke', be: string): Promise<T> {
  // An invoke's caller usually awaits it and handles the error itself: its line is for debugging.
  sent.catch((e: unknown) => log[what === 'send' ? 'warn' : 'debug']({ be, err: errorText(e) }, `plugin ${what} failed`));
  return sent;
}

/**
 * A plugin behavior as a kernel behavior: the same checks and observation; the handler sees the
 * plugin context, and runs inside the plugin's fault guard.
 */
const asBehavior = (b: NonNullable<PluginDefinition['behaviors']>[number], ctx: PluginContext, guarded: Guarded): Behavior<any, any> => ({
  name: b.name,
  capability: b.capability,
  payload: b.payload,
  description: b.description,
  handle: ({ env, payload }) => guarded(() => b.handle({ env, payload, ctx })),
});

/** Runs a plugin's code, and all it sets going, inside its actor's fault guard. */
type Guarded = <T>(fn: () => T) => T;

export interface PluginApi {
  ctx: PluginContext;
}

/**
 * A plugin's actor, made like every other component. Its handlers run as many at once as the
 * node's default allows, like the core's own; a plugin whose handlers share state across
 * awaits asks for `concurrency: 1`. A start hook that throws stops start-up naming the plugin.
 */
export const pluginActor = ({ spec, plugin, config, timeoutMs }: LoadedPlugin): ActorDefinition<object, PluginApi> =>
  defineActor({
    inbox: plugin.name,
    topics: plugin.topics,
    concurrency: plugin.concurrency ?? 'node',
    create: ({ actor, log }: ActorContext<object>) => {
      const ctx = pluginContext(plugin.name, actor, log, config);
      // A fault the plugin's own code lets escape (a timer that throws, a rejection it left
      // unhandled) is logged as the plugin's, where it ended the node's process, and any caller
      // of a /public behavior could set one off.
      const guard = new FaultGuard(log, 'plugin');
      const guarded: Guarded = (fn) => guard.within(plugin.name, (reason) => log.error({ plugin: plugin.name }, `${reason} (the node goes on)`), fn);
      return {
        behaviors: (plugin.behaviors ?? []).map((b) => asBehavior(b, ctx, guarded)),
        api: { ctx },
        start: async () => {
          guard.install();
          let late: DmsError | undefined;
          try {
            // Only a hook is run in the guard: its async context turns on Node 20's promise hooks,
            // which cost every job of the node ~10 % (storage/connection.ts), for a plugin that has none.
            await settledWithin(
              plugin.start ? guarded(() => Promise.resolve(plugin.start!(ctx))) : Promise.resolve(),
              timeoutMs,
              () => {
                throw (late = refused(spec, `(plugin ${plugin.name}) did not start ${tooSlow(timeoutMs)}`));
              },
              KEEP_ALIVE,
            );
          } catch (e) {
            guard.uninstall();
            if (e === late) throw e;
            throw refused(spec, `(plugin ${plugin.name}) failed to start: ${errorText(e)}`);
          }
        },
        stop: async () => {
          try {
            if (plugin.stop) await guarded(() => plugin.stop!(ctx));
          } finally {
            guard.uninstall();
          }
        },
      };
    },
  });

const EXECUTOR_METHODS = ['start', 'wait', 'readLogs', 'waitForLogs', 'cancel', 'cleanup', 'reconcile'] as const;

export interface PluginExecutorDeps extends ExecutorActorDeps {
  logsDir: string;
  maxLogBytes?: number;
}

/** One executor a plugin brings, as an executor actor at `executor/<name>`. */
export interface PluginExecutorActor {
  name: string;
  definition: ActorDefinition<PluginExecutorDeps, object>;
}

export function pluginExecutors({ spec, plugin, config }: LoadedPlugin): PluginExecutorActor[] {
  return (plugin.executors ?? []).map((ex: PluginExecutor) => ({
    name: ex.name,
    definition: defineExecutor(ex.name, ({ actor, log, deps }: ActorContext<PluginExecutorDeps>, parts) => {
      const logs = new JobLogs(deps.logsDir, deps.maxLogBytes);
      const impl = ex.create({
        ...pluginContext(plugin.name, actor, log, config),
        self: actor.handle,
        logs,
        newRun: (jobId, phase = 'creating') => newRun(parts.machine, jobId, phase),
        endOf,
        jobScope: parts.jobScope,
      });
      const missing = EXECUTOR_METHODS.filter((m) => typeof (impl as unknown as Record<string, unknown> | undefined)?.[m] !== 'function');
      if (missing.length) throw refused(spec, `(plugin ${plugin.name}): executor '${ex.name}' lacks ${missing.join(', ')}`);
      if (impl.name !== ex.name) throw refused(spec, `(plugin ${plugin.name}): executor '${ex.name}' made an executor named '${impl.name}'`);
      // A plugin hands outputs back (readOutput) for the node to import and sign; one claiming
      // to collect its own would leave jobs with outputs and no manifest.
      if (impl.collectsOutputs) throw refused(spec, `(plugin ${plugin.name}): executor '${ex.name}' sets collectsOutputs, which only the built-in Docker executor may: hand outputs back with readOutput`);
      if (impl.readOutput !== undefined && typeof impl.readOutput !== 'function') throw refused(spec, `(plugin ${plugin.name}): executor '${ex.name}' has a readOutput that is not a function`);
      return impl;
    }),
  }));
}

/** The plugins' REST routes, under `/api/v1/plugins/<name>`, documented like the node's own. */
export function pluginRoutes(plugins: { loaded: LoadedPlugin; ctx: PluginContext }[]): RouteModule {
  return ({ table }) => {
    for (const { loaded, ctx } of plugins) {
      const { plugin, spec } = loaded;
      for (const r of plugin.routes ?? []) {
        const path = `/api/v1/plugins/${plugin.name}${r.path === '/' ? '' : r.path}`;
        try {
          table.add({
            method: r.method,
            path,
            operationId: `plugin_${plugin.name.replace(/-/g, '_')}_${r.operationId}`,
            summary: r.summary,
            description: r.description,
            tags: [`plugin:${plugin.name}`],
            params: r.params ?? {},
            query: r.query,
            body: r.body,
            responses: r.responses ?? { 200: { description: 'ok' } },
            handler: (event, input) => r.handler(event, input, ctx),
          });
        } catch (e) {
          throw refused(spec, `(plugin ${plugin.name}): route ${r.method} ${path}: ${errorText(e)}`);
        }
      }
    }
  };
}
