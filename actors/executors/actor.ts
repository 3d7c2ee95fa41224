/**
 * Executors as actors. An executor is an actor at inbox `executor/<name>` answering the executor
 * protocol (behaviors/jobs/executor.ts); the orchestrator knows it by nothing else. How its
 * runs started and ended, pull steps and faults are reported to the orchestrator as /dms/job/…
 * envelopes.
 *
 * `defineExecutor` makes such an actor from an Executor implementation (Docker, null, or one a
 * plugin brings): it gives the implementation the actor's machine factory (each run's state is
 * a machine the node observes) and the scope of the actor's own executor guard, installs the
 * guard when the actor starts and removes it when it stops.
 */
import {
  CancelRunPayload,
  CleanupPayload,
  ExecutorBehaviors,
  executorInbox,
  JobNotifications,
  MAX_REPORT_TEXT,
  MAX_RUNS_PER_ENVELOPE,
  ReadLogsPayload,
  ReconcilePayload,
  type RunReport,
  StartPayload,
  type StartReport,
  WaitForLogsPayload,
  WatchPayload,
} from '../../behaviors/jobs/executor.js';
import { ORCHESTRATOR_INBOX } from '../../behaviors/jobs/jobs.js';
import { ENSEMBLE_NET_INBOX, EnsembleAttachReply, EnsembleNetBehaviors } from '../../behaviors/ensembles/schema.js';
import type { Actor } from '../../runtime/actor.js';
import type { Logger } from '../../runtime/log.js';
import { z } from 'zod';
import { defineBehavior, replyWhenDone } from '../../runtime/behavior.js';
import { type ActorContext, defineActor } from '../../runtime/component.js';
import { cutText, DmsError, errorText, notFound } from '../../runtime/errors.js';
import { DockerExecutor, type DockerExecutorOptions, type EnsembleAttacher } from './docker.js';
import { FaultGuard } from '../../runtime/fault-guard.js';
import { NullExecutor, type NullExecutorOptions } from './null.js';
import { RemoteFollower, type RemoteFollowerOptions } from './remote.js';
import type { MachineFactory } from '../../behaviors/jobs/run-machine.js';
import type { ExecutionHandle, Executor, ExecutorImplementation, ExitResult, PullProgress } from '../../behaviors/jobs/execution.js';
import { Batcher } from '../../runtime/batcher.js';
import type { OutputSpec } from '../../behaviors/jobs/files.js';
import type { Job } from '../../behaviors/jobs/schema.js';
import type { OutputCollector } from './outputs.js';

export interface ExecutorActorDeps {
  /** The inbox on this node told about runs (starts, ends, pull steps, faults); default the orchestrator's. */
  reportTo?: string;
  /**
   * Imports and signs the outputs a run hands back (Executor.readOutput) before its end is told,
   * and where each job's stored output (logs) is; without, a job declaring outputs is refused.
   */
  outputCollection?: { collector: OutputCollector; logPath(jobId: string): string };
}

/** What the actor gives its implementation. */
export interface ExecutorParts {
  /** Makes each run's machine, observed by the node (ActorContext.machine). */
  machine: MachineFactory;
  /** Runs `fn`, and all it sets going, on behalf of job `jobId`: a fault there fails that job, not the node. */
  jobScope: <T>(jobId: string, fn: () => T) => T;
}

/**
 * A failure told to the caller in its own words: a stop or recovery that fails is a job's error
 * or a warning, not a fault of the node to be hidden behind an error id.
 */
async function told<T>(work: () => Promise<T>): Promise<T> {
  try {
    return await work();
  } catch (e) {
    throw e instanceof DmsError ? e : new DmsError('unavailable', errorText(e), { cause: e });
  }
}

export interface ExecutorActorOptions {
  /**
   * Whether the implementation's calls run inside the actor's fault guard (runtime/fault-guard.ts); default
   * true. The guard is for code whose faults the node cannot see coming: an engine's library
   * (dockerode), a plugin's executor. It costs every promise of the whole process once it is
   * first used (Node 20's AsyncLocalStorage turns on promise hooks for all of them: 3-4 % of a
   * null job's CPU), so executors made only of the node's own code (null, remote) go without:
   * a fault there is the node's own, as anywhere else in it.
   */
  guarded?: boolean;
}

export function defineExecutor<Deps extends ExecutorActorDeps>(
  name: string,
  make: (ctx: ActorContext<Deps>, parts: ExecutorParts) => ExecutorImplementation,
  options: ExecutorActorOptions = {},
) {
  return defineActor({
    inbox: executorInbox(name),
    // Envelopes concern runs independent of each other, and the implementation's table of runs
    // is only changed synchronously; what waits long (a pull, a stop, a wait for output) answers
    // or reports when done instead of holding a mailbox slot, so a cancel never queues behind a pull.
    concurrency: 'node',
    create: (ctx: ActorContext<Deps>) => {
      const { actor, log, deps } = ctx;
      const guard = options.guarded === false ? null : new FaultGuard(log, 'executor');
      const reportTo = actor.local(deps.reportTo ?? ORCHESTRATOR_INBOX);
      const notDelivered = (be: string) => (e: unknown) => log.debug({ be, err: errorText(e) }, 'report not delivered');
      const report = (be: string, payload: unknown) => void actor.tell(reportTo, be, payload).catch(notDelivered(be));
      // Reports of one moment travel together.
      const batched = <T>(be: string) => {
        const batch = new Batcher<T>((runs) => actor.tell(reportTo, be, { runs }), MAX_RUNS_PER_ENVELOPE);
        return (run: T) => void batch.add(run).catch(notDelivered(be));
      };
      // Each report's texts within what its schema takes: the orchestrator refuses a batch with one
      // too long whole, and every run in it would wait for ever (a provider's refusal of a start, a
      // run's error, are its words, as long as an envelope allows).
      const startedReport = batched<StartReport>(JobNotifications.started);
      const exitedReport = batched<RunReport>(JobNotifications.exited);
      const started = (r: StartReport) => startedReport('error' in r ? { ...r, error: cutText(r.error, MAX_REPORT_TEXT) } : r);
      const exited = (r: RunReport) => exitedReport('lost' in r ? { ...r, lost: cutText(r.lost, MAX_REPORT_TEXT) } : { ...r, result: boundedResult(r.result) });
      const lost = (jobId: string, reason: string, handle?: ExecutionHandle) => exited({ job_id: jobId, ...(handle ? { handle } : {}), lost: reason });
      const scoped = <T>(jobId: string, fn: () => T): T => (guard ? guard.within(jobId, (reason) => lost(jobId, reason), fn) : fn());
      const impl = make(ctx, { machine: ctx.machine, jobScope: scoped });
      if (impl.name !== name) throw new DmsError('internal', `executor actor ${name} was given the executor "${impl.name}"`);

      // Outputs of implementations that do not collect their own (Docker does): what each running
      // job declared, and each ended run's collection, once, whether its end is seen by watch or cancel.
      const declared = new Map<string, { outputs: OutputSpec[]; requester: string | null }>();
      const collecting = new Map<string, Promise<void>>();
      /** Why this executor cannot run `job`, or null: it declares outputs nobody here would hand back. */
      const outputsProblem = (job: Job): string | null => {
        if (!job.outputs?.length || impl.collectsOutputs) return null;
        const names = job.outputs.map((o) => o.name).join(', ');
        if (!impl.readOutput) return `executor ${name} cannot hand back outputs, and the job declares ${names}: run it with an executor that can (docker, null)`;
        if (!deps.outputCollection) return `this node keeps no blocks, so the outputs the job declares (${names}) cannot be collected`;
        return null;
      };
      const ended = (handle: ExecutionHandle, result: ExitResult): Promise<void> => {
        const files = declared.get(handle.job_id);
        if (!files || !impl.readOutput || !deps.outputCollection) return Promise.resolve();
        let done = collecting.get(handle.job_id);
        if (!done) {
          const { collector, logPath } = deps.outputCollection;
          done = collector.collect((output) => impl.readOutput!(handle, output), { jobId: handle.job_id, ...files, exitCode: result.exit_code, logPath: logPath(handle.job_id) });
          collecting.set(handle.job_id, done);
        }
        return done;
      };
      const forget = (jobId: string) => {
        declared.delete(jobId);
        collecting.delete(jobId);
      };

      const progress = (jobId: string) => (p: PullProgress) => {
        // Progress ticks are many and say little: only the steps are told.
        if (p.current !== undefined || !p.status) return;
        report(JobNotifications.progress, { job_id: jobId, status: p.status.slice(0, 500), ...(p.id ? { id: p.id.slice(0, 200) } : {}), ...(p.stage ? { stage: p.stage } : {}) });
      };

      return {
        behaviors: [
          defineBehavior({
            name: ExecutorBehaviors.start,
            payload: StartPayload,
            handle: ({ payload: { jobs } }) => {
              for (const job of jobs) {
                const refused = outputsProblem(job);
                if (refused) {
                  started({ job_id: job.id, error: refused });
                  continue;
                }
                if (job.outputs?.length && !impl.collectsOutputs) declared.set(job.id, { outputs: job.outputs, requester: job.requester });
                scoped(job.id, () => impl.start(job, { onProgress: progress(job.id) })).then(
                  (handle) => started({ job_id: job.id, handle }),
                  (e: unknown) => started({ job_id: job.id, error: errorText(e) }),
                );
              }
            },
          }),
          defineBehavior({
            name: ExecutorBehaviors.watch,
            payload: WatchPayload,
            handle: ({ payload: { handles } }) => {
              for (const handle of handles) {
                scoped(handle.job_id, async () => {
                  const result = await impl.wait(handle);
                  // Before the end is told: the orchestrator stores the manifest with it.
                  await ended(handle, result);
                  return result;
                }).then(
                  (result) => exited({ job_id: handle.job_id, handle, result }),
                  (e: unknown) => lost(handle.job_id, `lost track of its run: ${errorText(e)}`, handle),
                );
              }
            },
          }),
          defineBehavior({
            name: ExecutorBehaviors.cancel,
            payload: CancelRunPayload,
            noReply: true,
            handle: (c) =>
              replyWhenDone(c, async () => {
                const { handle, reason } = c.payload;
                await told(() => scoped(handle.job_id, () => impl.cancel(handle, reason)));
                // The run has ended now, unless it was gone already (or its follower gave up on it).
                try {
                  const result = await impl.wait(handle);
                  await ended(handle, result);
                  return { result: boundedResult(result) };
                } catch (e) {
                  return { lost: cutText(errorText(e), 1000) };
                }
              }),
          }),
          defineBehavior({
            name: ExecutorBehaviors.cleanup,
            payload: CleanupPayload,
            handle: ({ payload: { handles } }) => {
              for (const handle of handles) {
                forget(handle.job_id);
                scoped(handle.job_id, () => impl.cleanup(handle)).catch((e: unknown) =>
                  log.warn({ job: handle.job_id, err: errorText(e) }, 'run not cleaned up'),
                );
              }
            },
          }),
          defineBehavior({
            name: ExecutorBehaviors.readLogs,
            payload: ReadLogsPayload,
            handle: async ({ payload: { handle, from, limit, previous, log } }) => {
              if (!previous) return impl.readLogs(handle, from, limit, log);
              const page = impl.readPreviousLogs ? await impl.readPreviousLogs(handle, from, limit) : null;
              if (!page) throw notFound(`job ${handle.job_id} has no earlier run's output on this node (kept: the run before its current one, when it was placed again)`);
              return page;
            },
          }),
          defineBehavior({
            name: ExecutorBehaviors.waitForLogs,
            payload: WaitForLogsPayload,
            noReply: true,
            handle: (c) =>
              replyWhenDone(c, async () => {
                const ac = new AbortController();
                const timer = setTimeout(() => ac.abort(), c.payload.wait_ms);
                try {
                  return { found: await impl.waitForLogs(c.payload.handle, c.payload.from, ac.signal) };
                } finally {
                  clearTimeout(timer);
                }
              }),
          }),
          defineBehavior({
            name: ExecutorBehaviors.reconcile,
            payload: ReconcilePayload,
            handle: ({ payload }) => told(() => impl.reconcile(payload.job_ids)),
          }),
        ],
        start: async () => {
          // Before any run is started or picked up: from here on a fault fails its job, not the node.
          guard?.install();
          await impl.open?.();
        },
        stop: async () => {
          await impl.close?.();
          guard?.uninstall();
        },
      };
    },
  });
}

/** An attach waits for the requester's grant (a few seconds at most) and for the engine to make networks. */
const ATTACH_TTL_MS = 30_000;

/** The ensemble-net actor on this node, asked by envelope (README "Names between parts"). */
function ensembleAttacher(actor: Actor, log: Logger): EnsembleAttacher {
  const net = actor.local(ENSEMBLE_NET_INBOX);
  return {
    async attach(job) {
      const reply = await actor.call(net, EnsembleNetBehaviors.attach, { job_id: job.id, ensemble: job.ensemble, part: job.part, requester: job.requester }, EnsembleAttachReply, { ttlMs: ATTACH_TTL_MS });
      return { networks: reply.networks, extraHosts: reply.extra_hosts };
    },
    async detach(jobId) {
      // Its networks are removed with the ensemble's last part here, or at the next start.
      await actor.call(net, EnsembleNetBehaviors.detach, { job_id: jobId }, z.unknown()).catch((e: unknown) => log.debug({ job: jobId, err: errorText(e) }, 'ensemble detach not delivered'));
    },
  };
}

/** Runs jobs as Docker containers (./docker.ts). */
export const DockerExecutorActor = defineExecutor(
  'docker',
  ({ actor, deps, log }: ActorContext<Omit<DockerExecutorOptions, 'machine' | 'jobScope' | 'log' | 'ensembles'> & ExecutorActorDeps>, parts) =>
    new DockerExecutor({ ...deps, ...parts, log, ensembles: ensembleAttacher(actor, log) }),
);

/** Plays runs back without running anything (./null.ts). */
export const NullExecutorActor = defineExecutor(
  'null',
  ({ deps }: ActorContext<Omit<NullExecutorOptions, 'machine'> & ExecutorActorDeps>, { machine }) => new NullExecutor({ ...deps, machine }),
  { guarded: false },
);

/** Follows jobs this node placed on other nodes (./remote.ts). */
export const RemoteFollowerActor = defineExecutor(
  'remote',
  ({ actor, deps }: ActorContext<Omit<RemoteFollowerOptions, 'actor' | 'machine'> & ExecutorActorDeps>, { machine }) => new RemoteFollower({ ...deps, actor, machine }),
  { guarded: false },
);

/** A run's result with its error, if any, within MAX_REPORT_TEXT: it is stored with the job, in its record and its history. */
function boundedResult(result: ExitResult): ExitResult {
  return result.error === undefined ? result : { ...result, error: cutText(result.error, MAX_REPORT_TEXT) };
}
