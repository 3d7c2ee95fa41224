/**
 * The orchestrator actor (inbox `orchestrator`): accepts jobs, places them on this node when
 * the resource manager grants their resources, runs them through their executor and records
 * every step. Each job is a JobRun driven by the job machine (./machine.ts), made through the
 * actor's `machine()` so every step of every job is a transition the node's inspector sees;
 * this actor supplies the machine's effects. Executors are actors too, asked by envelopes only
 * (./executors.ts); they report a run's end with /dms/job/exited. What a caller is told always
 * comes from the database, and every write goes through the journal (group commit), so nothing
 * is acknowledged before it is durable.
 */
import { type EventObject, fromCallback } from 'xstate';
import type { z } from 'zod';
import {
  ExitedPayload,
  JobNotifications,
  ProgressPayload,
  REPORT_CAPABILITY,
  type RunReport,
  StartedPayload,
  type StartReport,
} from '../../behaviors/jobs/executor.js';
import {
  CancelPayload,
  JobBehaviors,
  type JobEventsReply,
  JobIdPayload,
  type JobListReply,
  ListPayload,
  LogsPayload,
  type LogsReply,
  ORCHESTRATOR_INBOX,
  SubmitPayload,
} from '../../behaviors/jobs/jobs.js';
import { AcceptPayload, DEPLOYMENT_INBOX, DEPLOYMENT_INTERNAL_CAPABILITY, DeploymentBehaviors, PlaceReply } from '../../behaviors/jobs/deployment.js';
import { Batcher, callBehavior, handleAt, localHandle, replyWhenDone, tell } from '../../behaviors/jobs/replies.js';
import { EmptyPayload, ReleaseReply, ReserveReply, ResourceBehaviors, RESOURCES_INBOX, UsageReply } from '../../behaviors/jobs/resources.js';
import { redactJob } from '../../behaviors/jobs/redaction.js';
import { type Attempt, isTerminal, JOB_STATUSES, type Job, type JobSpec, type ResourceCapacity, type ResourceSpec } from '../../behaviors/jobs/schema.js';
import type { Actor } from '../../runtime/actor.js';
import { defineBehavior } from '../../runtime/behavior.js';
import { type ActorContext, defineActor } from '../../runtime/component.js';
import { DmsError, errorText, invalid, notFound } from '../../runtime/errors.js';
import type { Logger } from '../../runtime/log.js';
import type { Envelope, Handle } from '../../runtime/wire/envelope.js';
import { ownKeys } from '../../runtime/capability/authority.js';
import type { JobChange, Storage } from '../../storage/index.js';
import { ExecutorRegistry } from '../executors/registry.js';
import { REMOTE_EXECUTOR } from '../executors/remote.js';
import type { ExecutionHandle } from '../executors/types.js';
import { ExecutorClient } from './executors.js';
import { JobJournal } from './journal.js';
import { aborted, type LogSource } from './logs.js';
import { type JobMachineContext, type JobMachineEvent, jobMachine, type StartInput, type StopInput, timeoutClock } from './machine.js';
import { type ExecutorFindings, planRecovery } from './recovery.js';
import { refusedRegistry, refusedRegistryResolved } from './registries.js';
import { whyNoNodeCouldHold } from '../../behaviors/jobs/fit.js';
import { type JobMachine, JobRun } from './run.js';
import { Scheduler } from './scheduler.js';

export interface OrchestratorDeps {
  storage: Storage;
  /** Names of this node's executor actors (inboxes `executor/<name>`): the executors a job may name. */
  executors: readonly string[];
  /** What a job gets when it asks for zero cores or memory (`jobs.default_resources`). */
  defaultResources?: { cores: number; memory_bytes: number };
  /** Private registry hosts images may name (`jobs.allowed_registries`). */
  allowedRegistries?: readonly string[];
  /**
   * Whether an envelope's sender may see job environments: the node's own keys and its root
   * identities. Defaults to the node's own keys only.
   */
  trusted?: (env: Envelope) => boolean;
  /**
   * How many peers are connected now. With any, a job this node cannot hold now (or whose
   * placement asks for another node, a location or labels) is placed on the network through
   * the deployment actor and followed through the remote executor (`executor/remote`).
   * Absent: jobs never leave this node.
   */
  peers?: () => number;
  /** The offer back-off: first wait and bound (`deployment.offer_retry_ms`, `deployment.max_offer_backoff_ms`). */
  offerBackoff?: { firstMs: number; maxMs: number };
}

/** How often jobs no node could take are offered again. */
const PLACE_RETRY_MS = 1_000;
/** Longest wait between two offers of a job nobody takes: a node that appears or grows its share gets it within this. */
const MAX_PLACE_BACKOFF_MS = 8_000;
/** Longest a placement (offer, bids, reservation) may take. */
const PLACE_TTL_MS = 30_000;

/** `jobs.default_resources` as shipped, for orchestrators built without a config (tests, benches). */
const DEFAULT_RESOURCES = { cores: 1, memory_bytes: 512 * 1024 * 1024 };

/** Most job ids one release message carries. */
const MAX_RELEASE = 5000;

export const OrchestratorActor = defineActor({
  inbox: ORCHESTRATOR_INBOX,
  // Handlers wait on the database and the journal and are independent of each other: the job
  // table and the job machines are only touched between awaits, never across one. Many
  // submissions in flight at once is also what lets them share one group commit.
  concurrency: 'node',
  create: (ctx: ActorContext<OrchestratorDeps>) => {
    const orchestrator = new Orchestrator(ctx);
    ctx.system.metrics?.gauge('dms_jobs', 'Jobs stored on this node, by status', ['status'], async (set) => {
      for (const status of JOB_STATUSES) set({ status }, await ctx.deps.storage.jobs.count({ status }));
    });
    return {
      behaviors: orchestrator.behaviors(),
      api: { journal: orchestrator.journal },
      // The executors and the resource manager are already running: what a previous process
      // left is recovered before any job is placed.
      start: () => orchestrator.recover(),
      stop: () => orchestrator.halt(),
    };
  },
});

class Orchestrator {
  readonly journal: JobJournal;
  private readonly actor: Actor;
  private readonly storage: Storage;
  /** The executor actors, each as the client that asks it by envelopes. */
  private readonly executors = new ExecutorRegistry<ExecutorClient>();
  /** Executors jobs may name (the remote executor is not one: it follows jobs, it does not run them). */
  private readonly runnable: ReadonlySet<string>;
  private readonly remote: ExecutorClient | null;
  private readonly peers: () => number;
  private readonly backoff: { firstMs: number; maxMs: number };
  /** Jobs no node could take at their last offer: offered again every PLACE_RETRY_MS. */
  private readonly unplaced = new Set<string>();
  private placeRetry: NodeJS.Timeout | null = null;
  private readonly log: Logger;
  private readonly machine: JobMachine;
  /** Makes a job's machine as one of this actor's: the node's inspector sees its transitions. */
  private readonly makeMachine: ActorContext<OrchestratorDeps>['machine'];
  private readonly scheduler: Scheduler;
  /** Jobs not yet finished, by id. A job leaves once its final state is committed. */
  private readonly runs = new Map<string, JobRun>();
  private readonly manager: Handle;
  /** Jobs whose resources go back to the manager, those of one moment in one message. */
  private readonly releases = new Batcher<string>((ids) => this.sendReleases(ids), MAX_RELEASE);
  private stopping = false;
  private readonly defaults: { cores: number; memory_bytes: number };
  private readonly allowedRegistries: readonly string[];
  private readonly trusted: (env: Envelope) => boolean;
  /** This machine's capacity, as the resource manager measured it at start (it does not change while the node runs). */
  private capacity: Promise<ResourceCapacity> | null = null;

  constructor({ actor, system, log, deps, machine }: ActorContext<OrchestratorDeps>) {
    this.actor = actor;
    this.storage = deps.storage;
    this.log = log;
    this.makeMachine = machine;
    for (const name of deps.executors) this.executors.register(new ExecutorClient(actor, name));
    this.runnable = new Set(deps.executors);
    this.remote = deps.peers ? new ExecutorClient(actor, REMOTE_EXECUTOR) : null;
    if (this.remote) this.executors.register(this.remote);
    this.peers = deps.peers ?? (() => 0);
    this.backoff = deps.offerBackoff ?? { firstMs: PLACE_RETRY_MS, maxMs: MAX_PLACE_BACKOFF_MS };
    this.defaults = deps.defaultResources ?? DEFAULT_RESOURCES;
    this.allowedRegistries = deps.allowedRegistries ?? [];
    const own = ownKeys(system);
    this.trusted = deps.trusted ?? ((env) => own(env.from.id));
    this.journal = new JobJournal(deps.storage.jobs);
    this.machine = jobMachine.provide({
      actors: {
        start: fromCallback<EventObject, StartInput>(({ input, sendBack }) => this.start(input, sendBack)),
        stop: fromCallback<EventObject, StopInput>(({ input, sendBack }) => this.stop(input, sendBack)),
      },
      actions: {
        persistRunning: ({ context }) => this.persistRunning(context),
        watch: ({ context }) => this.watch(context),
        finish: ({ context }, { status }) => this.finish(context, status),
        replace: ({ context }, params) => this.replace(context, params),
      },
    });
    this.scheduler = new Scheduler(
      {
        reserve: (jobs) => callBehavior(this.actor, this.manager, ResourceBehaviors.reserve, { jobs }, ReserveReply),
        granted: (run) => {
          // Being placed on the network meanwhile: one place only, so this share goes back.
          if (run.offering) return this.release(run.id);
          this.unplaced.delete(run.id);
          system.metrics?.placements.labels('placed').inc();
          run.send({ type: 'reserved' });
        },
        unwanted: (id) => this.release(id),
        refused: (run, reason) => {
          // Not here, not now: another node may hold it (unless it was offered lately and waits its turn).
          if (this.mayLeave(run) && Date.now() >= run.nextOfferAt) {
            this.scheduler.remove(run.id);
            this.offer(run);
            return;
          }
          system.metrics?.placements.labels('waiting').inc();
          this.noteWaiting(run, reason);
        },
      },
      log,
    );
    this.manager = localHandle(actor, RESOURCES_INBOX);
  }

  /** Stops placing and following jobs and waits for every write made so far. Runs are left running. */
  async halt(): Promise<void> {
    this.stopping = true;
    this.scheduler.halt();
    if (this.placeRetry) clearTimeout(this.placeRetry);
    for (const run of this.runs.values()) run.halt();
    await this.journal.drain();
    await this.releases.drain();
    const { writes, commits } = this.journal.stats;
    this.log.info({ writes, commits }, 'job journal drained');
  }

  // --- behaviors -------------------------------------------------------------------------

  behaviors() {
    // Senders that are not this node or its roots get jobs without their environment values.
    const shown = (env: Envelope) => (this.trusted(env) ? (job: Job) => job : redactJob);
    return [
      defineBehavior({
        name: JobBehaviors.submit,
        payload: SubmitPayload,
        handle: async ({ env, payload }) => shown(env)(await this.submit(payload)),
      }),
      defineBehavior({
        name: JobBehaviors.status,
        payload: JobIdPayload,
        handle: async ({ env, payload }) => shown(env)(await this.status(payload.id)),
      }),
      defineBehavior({
        name: JobBehaviors.list,
        payload: ListPayload,
        handle: async ({ env, payload }) => {
          const reply = await this.list(payload);
          return { ...reply, jobs: reply.jobs.map(shown(env)) };
        },
      }),
      defineBehavior({
        name: JobBehaviors.events,
        payload: JobIdPayload,
        // Events carry statuses and reasons, never the environment: nothing to redact.
        handle: ({ payload }) => this.events(payload.id),
      }),
      // Both wait (for a container to stop, for output): they answer later and free the mailbox meanwhile.
      defineBehavior({
        name: JobBehaviors.cancel,
        payload: CancelPayload,
        noReply: true,
        handle: (ctx) => replyWhenDone(ctx, async () => shown(ctx.env)(await this.cancel(ctx.payload.id, ctx.payload.reason))),
      }),
      defineBehavior({
        name: JobBehaviors.logs,
        payload: LogsPayload,
        noReply: true,
        handle: (ctx) => replyWhenDone(ctx, () => this.logs(ctx.payload)),
      }),
      defineBehavior({
        name: JobBehaviors.accept,
        payload: AcceptPayload,
        capability: DEPLOYMENT_INTERNAL_CAPABILITY,
        handle: ({ payload }) => this.accept(payload.job, payload.requester),
      }),
      defineBehavior({
        name: JobBehaviors.schedule,
        payload: EmptyPayload,
        handle: () => {
          this.resourcesFreed();
          return {};
        },
      }),
      // What the executors report about runs.
      defineBehavior({
        name: JobNotifications.started,
        payload: StartedPayload,
        capability: REPORT_CAPABILITY,
        handle: ({ payload }) => this.started(payload.runs),
      }),
      defineBehavior({
        name: JobNotifications.exited,
        payload: ExitedPayload,
        capability: REPORT_CAPABILITY,
        handle: ({ payload }) => this.exited(payload.runs),
      }),
      defineBehavior({
        name: JobNotifications.progress,
        payload: ProgressPayload,
        capability: REPORT_CAPABILITY,
        handle: ({ payload }) => this.notePull(payload),
      }),
    ];
  }

  private async submit(spec: JobSpec): Promise<Job> {
    if (this.stopping) throw new DmsError('unavailable', 'the node is stopping');
    // Whether it may go to a node other than this one, which may have what this one lacks.
    const here = spec.placement?.local === true || (spec.placement?.node !== undefined && this.actor.system.isHere(spec.placement.node));
    const network = !here && this.remote !== null && (this.peers() > 0 || spec.placement?.node !== undefined);
    // An executor this node lacks is taken only for a job aimed at other nodes (pinned, or by
    // labels or location): anywhere else it is more likely a typo than a plan.
    const aimed = spec.placement?.node !== undefined || spec.placement?.labels !== undefined || spec.placement?.location !== undefined;
    if (!this.runnable.has(spec.executor) && !(network && aimed)) {
      throw invalid(`executor: no executor named "${spec.executor}" on this node (available: ${[...this.runnable].join(', ')})`);
    }
    const refused = await refusedRegistryResolved(spec.image, this.allowedRegistries);
    if (refused) throw invalid(refused);
    const resources = this.withDefaults(spec.resources);
    // A job that could wait for resources to be freed is accepted; one no machine could ever
    // hold would wait forever. Peers may be bigger: placement then says why none takes it.
    if (!network) {
      const never = whyNoNodeCouldHold(resources, [{ label: 'this node', capacity: await this.machineCapacity() }]);
      if (never) throw new DmsError('conflict', never);
    }
    // Stored with the defaults filled in: what the job holds, and is limited to, is on its record.
    const job = await this.journal.create({ ...spec, resources });
    this.queue(this.track(job));
    return job;
  }

  /** A job another node placed here (its reservation is held): run as one of this node's own, never passed on. */
  private async accept(spec: z.output<typeof AcceptPayload>['job'], requester: string): Promise<Job> {
    if (this.stopping) throw new DmsError('unavailable', 'the node is stopping');
    if (!this.runnable.has(spec.executor)) throw invalid(`executor: no executor named "${spec.executor}" on this node`);
    // Looked up here, by the node whose engine would pull: the requester's lookup says nothing
    // about the names of this node's network, and a hostile requester makes none.
    const refused = await refusedRegistryResolved(spec.image, this.allowedRegistries);
    if (refused) throw invalid(refused);
    const { id, ...rest } = spec;
    // Whatever the requester sent, the job runs within this node's defaults and limits.
    const job = await this.journal.create({ ...rest, resources: this.withDefaults(rest.resources) }, { id, requester });
    this.queue(this.track(job));
    return job;
  }

  /** What the resource manager measured this machine to have; asked once, as it is fixed for the life of the node. */
  private machineCapacity(): Promise<ResourceCapacity> {
    this.capacity ??= callBehavior(this.actor, this.manager, ResourceBehaviors.usage, {}, UsageReply).then(
      (usage) => usage.capacity,
      (e: unknown) => {
        // Not kept: the next submission asks again.
        this.capacity = null;
        throw e;
      },
    );
    return this.capacity;
  }

  private async list(p: { status?: Job['status'][]; limit: number; offset: number; order: 'asc' | 'desc' }): Promise<JobListReply> {
    const [jobs, total] = await Promise.all([this.storage.jobs.list(p), this.storage.jobs.count({ status: p.status })]);
    return { jobs, total };
  }

  /** Every stored transition of the job, oldest first. */
  private async events(id: string): Promise<JobEventsReply> {
    if (!(await this.storage.jobs.get(id))) throw notFound(`job ${id} not found`);
    const events = await this.storage.events.listFor(id);
    return { id, events: events.map((e) => ({ at: e.at, from: e.from_status, to: e.to_status, reason: e.reason })) };
  }

  private async status(id: string): Promise<Job> {
    const job = await this.storage.jobs.get(id);
    if (!job) throw notFound(`job ${id} not found`);
    return job;
  }

  /** Resolves with the failed job once its end is committed. */
  private async cancel(id: string, reason?: string): Promise<Job> {
    const why = reason ? `cancelled: ${reason}` : 'cancelled';
    const run = this.runs.get(id);
    if (run) {
      if (!run.finished) {
        this.scheduler.remove(id);
        run.send({ type: 'cancel', reason: why });
        return run.settled;
      }
      const job = await run.settled;
      throw new DmsError('conflict', `job ${id} has already ${job.status}`);
    }
    const job = await this.storage.jobs.get(id);
    if (!job) throw notFound(`job ${id} not found`);
    if (isTerminal(job.status)) throw new DmsError('conflict', `job ${id} has already ${job.status}`);
    // Unfinished but not followed: its executor could not be asked after a restart. Stop
    // what can still be stopped, and record the end.
    const source = this.logSource(job, undefined);
    await source?.executor.cancel(source.handle, why).catch((e: unknown) => this.log.warn({ job: id, err: errorText(e) }, 'could not stop run'));
    return this.journal.change(id, { status: 'failed', reason: why, error: why });
  }

  /**
   * A page of output from byte `from` ('end': the current end). With `wait_ms`, an answer that
   * would be empty waits for output, a state change or the end of the job, whichever comes first.
   */
  private async logs(p: { id: string; from: number | 'end'; limit: number; wait_ms: number }): Promise<LogsReply> {
    const deadline = Date.now() + p.wait_ms;
    // Past the end reads as the end, which is what 'end' asks for.
    let from = p.from === 'end' ? Number.MAX_SAFE_INTEGER : p.from;
    let followed: JobRun | undefined;
    for (;;) {
      const run = this.runs.get(p.id);
      // A run that ended while we waited hands over its committed final state: no need to read it back.
      const job = (!run && followed?.final) || (await this.storage.jobs.get(p.id));
      followed = run;
      if (!job) throw notFound(`job ${p.id} not found`);
      // Decided before reading: a job already finished has every chunk of its output stored.
      const ended = run === undefined && isTerminal(job.status);
      const source = this.logSource(job, run);
      const page = source ? await source.executor.readLogs(source.handle, from, p.limit) : { chunks: [], next: 0, size: 0 };
      from = page.next;
      const more = page.next < page.size;
      const done = ended && !more;
      const left = deadline - Date.now();
      if (page.chunks.length > 0 || more || done || left <= 0) {
        const { id, status, exit_code, error, pending_reason } = job;
        return { id, status, exit_code, error, pending_reason, chunks: page.chunks, next: page.next, more, done };
      }
      await this.news(run, source, from, left);
    }
  }

  /** Waits up to `ms` for output beyond byte `from` or a change of the run. */
  private async news(run: JobRun | undefined, source: LogSource | null, from: number, ms: number): Promise<void> {
    const ac = new AbortController();
    const timer = setTimeout(() => ac.abort(), ms);
    try {
      const waits = [aborted(ac.signal)];
      if (run) {
        waits.push(run.nextChange(ac.signal));
        if (source) {
          // Output that ended or cannot be read is no news: the other waits decide.
          const quiet = () => aborted(ac.signal);
          waits.push(source.executor.waitForLogs(source.handle, from, ms).then((found) => (found ? undefined : quiet()), quiet));
        }
      }
      await Promise.race(waits);
    } finally {
      clearTimeout(timer);
      ac.abort();
    }
  }

  private logSource(job: Job, run: JobRun | undefined): LogSource | null {
    if (this.remotely(job)) return { executor: this.remote!, handle: run?.handle ?? { executor: REMOTE_EXECUTOR, job_id: job.id, id: job.node! } };
    if (!this.executors.has(job.executor)) return null;
    const handle: ExecutionHandle = run?.handle ?? { executor: job.executor, job_id: job.id, id: job.container_id ?? job.id };
    return { executor: this.executors.get(job.executor), handle };
  }

  /**
   * Zero cores or memory gets `jobs.default_resources`: every job is accounted against the
   * onboarded share and runs under limits, whatever it asked for.
   */
  private withDefaults(resources: ResourceSpec): ResourceSpec {
    const cores = resources.cpu.cores > 0 ? resources.cpu.cores : this.defaults.cores;
    const size = resources.memory.size > 0 ? resources.memory.size : this.defaults.memory_bytes;
    return { ...resources, cpu: { cores }, memory: { size } };
  }

  /** Why a stored job may no longer be started (a release that admitted it checked less); null when it may. */
  private unstartable(job: Job): string | null {
    const image = SubmitPayload.shape.image.safeParse(job.image);
    if (!image.success) return `image: ${image.error.issues[0].message}`;
    return refusedRegistry(job.image, this.allowedRegistries);
  }

  // --- the machine's effects -------------------------------------------------------------

  private track(job: Job): JobRun {
    // Jobs stored before defaults applied still reserve (and are limited to) them.
    const placements = job.attempts.filter((a) => !this.actor.system.isHere(a.node)).length;
    const input = { jobId: job.id, timeoutS: job.timeout_s, maxAttempts: job.placement?.max_attempts ?? 3, placements };
    const machine = this.makeMachine(this.machine, { id: job.id, input, clock: timeoutClock });
    const run = new JobRun({ ...job, resources: this.withDefaults(job.resources) }, machine);
    this.runs.set(job.id, run);
    return run.start();
  }

  private run(ctx: { jobId: string }): JobRun {
    return this.runs.get(ctx.jobId)!;
  }

  /** Whoever runs it: its executor here, or the remote executor following it on another node. */
  private executorOf(run: JobRun): ExecutorClient {
    return this.remotely(run.job) ? this.remote! : this.executors.get(run.job.executor);
  }

  /** Placed on another node (this node follows it there). */
  private remotely(job: Job): boolean {
    return this.remote !== null && job.node !== null && job.requester === null && !this.actor.system.isHere(job.node);
  }

  /** The invoked `start`: asks the executor to start the run; how it went is reported (see started()). */
  private start(input: StartInput, sendBack: (event: JobMachineEvent) => void): void {
    const run = this.run(input);
    this.executorOf(run)
      .start(run.job)
      .catch((e: unknown) => sendBack({ type: 'start_failed', error: errorText(e) }));
  }

  /** An executor reported how starts went. */
  private started(reports: StartReport[]): void {
    for (const report of reports) {
      const run = this.runs.get(report.job_id);
      if ('error' in report) run?.send({ type: 'start_failed', error: report.error });
      // The job was failed meanwhile (an executor fault): nothing may keep running for it.
      else if (!run || (run.finished && run.handle === null)) void this.executors.get(report.handle.executor).cleanup(report.handle).catch(() => undefined);
      else run.send({ type: 'started', handle: report.handle });
    }
  }

  private persistRunning(ctx: JobMachineContext): void {
    const run = this.run(ctx);
    run.runningSince ??= performance.now();
    const node = ctx.node ?? this.actor.system.host;
    // A reattached run already has its attempt open.
    if (run.attempts.at(-1)?.ended_at !== null || run.attempts.at(-1)?.node !== node) {
      run.attempts.push({ node, started_at: new Date().toISOString(), ended_at: null, outcome: null, reason: null });
    }
    const change: JobChange = { status: 'running', reason: ctx.reason, container_id: ctx.handle!.id, node, attempts: [...run.attempts] };
    this.journal.change(ctx.jobId, change).then(
      (job) => (run.job = job),
      (e: unknown) => this.log.error({ job: ctx.jobId, err: errorText(e) }, 'running state not stored'),
    );
  }

  /** Asks the executor to report the run's end (/dms/job/exited, see exited()). */
  private watch(ctx: JobMachineContext): void {
    const run = this.run(ctx);
    this.executorOf(run)
      .watch(ctx.handle!)
      .catch((e: unknown) => run.send({ type: 'lost', reason: `lost track of its run: ${errorText(e)}` }));
  }

  /** The invoked `stop`: the run is stopped (cancel, timeout); answers once it is gone. */
  private stop(input: StopInput, sendBack: (event: JobMachineEvent) => void): void {
    this.executors
      .get(input.handle.executor)
      .cancel(input.handle, input.reason)
      .then(
        // However it ended, it is gone; without a result it is gone without one.
        (result) => sendBack(result ? { type: 'exited', result } : { type: 'lost', reason: input.reason }),
        // Its end may still be reported; until then the job stays stopping.
        (e: unknown) => this.log.warn({ job: input.jobId, err: errorText(e) }, 'could not stop run'),
      );
  }

  /** An executor reported runs' ends, or that it can no longer follow them (a fault, a vanished container). */
  private exited(reports: RunReport[]): void {
    for (const report of reports) this.ended(report);
  }

  private ended(report: RunReport): void {
    const run = this.runs.get(report.job_id);
    // A report about another run of the job (an earlier attempt) says nothing about this one.
    if (!run || (report.handle && run.handle && report.handle.id !== run.handle.id)) return;
    if ('result' in report) {
      run.send({ type: 'exited', result: report.result });
      return;
    }
    // Whichever applies: a fault while starting fails the start, one later loses the run.
    run.send({ type: 'start_failed', error: report.lost });
    run.send({ type: 'lost', reason: report.lost });
  }

  /** Records the end; then the run's resources, container and waiters are let go. */
  private finish(ctx: JobMachineContext, status: 'completed' | 'failed'): void {
    const run = this.run(ctx);
    if (run.runningSince !== null) this.actor.system.metrics?.runSeconds.labels(run.job.executor, status).observe((performance.now() - run.runningSince) / 1000);
    this.scheduler.remove(ctx.jobId);
    this.release(ctx.jobId);
    const error = status === 'failed' ? (ctx.error ?? ctx.reason) : null;
    const closed = closeAttempt(run.attempts, status, error);
    const change: JobChange = { status, reason: ctx.reason, exit_code: ctx.exitCode, error, ...(closed ? { attempts: [...run.attempts] } : {}) };
    // Run here for another node: its deployment is over.
    if (run.job.requester) {
      void tell(this.actor, localHandle(this.actor, DEPLOYMENT_INBOX), DeploymentBehaviors.ended, { job_id: ctx.jobId }).catch(() => undefined);
    }
    this.journal.change(ctx.jobId, change).then(
      (job) => {
        this.runs.delete(ctx.jobId);
        run.end({ job });
        // Only now: removing the container before the end is stored could make a crash in
        // between look like a vanished run.
        if (ctx.handle) this.cleanup(run, ctx.handle);
      },
      (e: unknown) => {
        this.runs.delete(ctx.jobId);
        run.end({ error: e });
        this.log.error({ job: ctx.jobId, err: errorText(e) }, 'final state not stored');
      },
    );
  }

  private cleanup(run: JobRun, handle: ExecutionHandle): void {
    this.executorOf(run)
      .cleanup(handle)
      .catch((e: unknown) => this.log.warn({ job: run.id, err: errorText(e) }, 'run not cleaned up'));
  }

  // --- placement -------------------------------------------------------------------------

  /**
   * Where a tracked pending job goes next: this node's scheduler (which passes it to the
   * network if this node cannot hold it now), or straight to the network when its placement
   * names another node, a location or labels.
   */
  private queue(run: JobRun): void {
    const p = run.job.placement;
    if (p?.node && this.actor.system.isHere(p.node)) run.placedHere = true;
    if (this.aimedElsewhere(run)) return this.offer(run);
    // Asked afresh: a refusal here from before it went to the network says nothing now.
    run.refusedIn = -1;
    this.scheduler.add(run);
  }

  /** Whether the job's placement names another node, a location or labels: it is always offered, never taken by this node's scheduler. */
  private aimedElsewhere(run: JobRun): boolean {
    const p = run.job.placement;
    return !run.placedHere && this.remote !== null && (p?.node !== undefined || p?.location !== undefined || p?.labels !== undefined);
  }

  /** Whether a job this node cannot hold now may be offered to other nodes. */
  private mayLeave(run: JobRun): boolean {
    return !run.placedHere && this.remote !== null && !this.stopping && this.peers() > 0;
  }

  /** Asks the deployment actor to place the job; it then starts there, starts here, or waits with the reason. */
  private offer(run: JobRun): void {
    if (run.offering || run.finished) return;
    // One place at a time: it leaves this node's queue while the network is asked.
    this.scheduler.remove(run.id);
    run.offering = true;
    this.unplaced.delete(run.id);
    const { job } = run;
    const request = { job_id: job.id, resources: job.resources, executor: job.executor, placement: job.placement, exclude: [...run.exclude] };
    callBehavior(this.actor, localHandle(this.actor, DEPLOYMENT_INBOX), DeploymentBehaviors.place, request, PlaceReply, { ttlMs: PLACE_TTL_MS })
      .catch((e: unknown): PlaceReply => ({ waiting: `placement failed: ${errorText(e)}` }))
      .then((reply) => {
        run.offering = false;
        if ('waiting' in reply) return this.unplacedFor(run, reply.waiting);
        if (this.actor.system.isHere(reply.node)) {
          // This node's own bid won: its scheduler reserves (and, finding it short after all, offers it again).
          if (run.pending) this.scheduler.add(run);
          return;
        }
        this.placeOn(run, reply.node);
      });
  }

  /** Reserved on `node`: recorded there, then started through the remote executor. */
  private placeOn(run: JobRun, node: string): void {
    if (!run.pending || this.stopping) {
      // Cancelled meanwhile: the reservation there is let go rather than left to run out.
      void tell(this.actor, handleAt(node, DEPLOYMENT_INBOX), DeploymentBehaviors.release, { job_id: run.id }).catch(() => undefined);
      return;
    }
    this.actor.system.metrics?.placements.labels('placed').inc();
    // Recorded, not waited for: the record is history (journal writes keep their order, so it
    // comes before the running one), and a requester that restarts before the job runs places
    // it anew whatever it says.
    this.journal.change(run.id, { node, reason: `placed on node ${node}`, pending_reason: null }).catch((e: unknown) => {
      this.log.warn({ job: run.id, err: errorText(e) }, 'placement not stored');
    });
    run.job = { ...run.job, node, pending_reason: null };
    run.offerBackoffMs = 0;
    run.send({ type: 'placed', node });
  }

  /** Nobody can take it now: it waits, says why, and is offered again shortly. */
  private unplacedFor(run: JobRun, reason: string): void {
    if (!run.pending) return;
    this.actor.system.metrics?.placements.labels('waiting').inc();
    this.noteWaiting(run, reason, 'waiting for a node');
    // Each fruitless offer doubles the wait before the next, up to MAX_PLACE_BACKOFF_MS: a
    // full network is not flooded with offers of jobs it cannot take.
    run.offerBackoffMs = Math.min(this.backoff.maxMs, run.offerBackoffMs * 2 || this.backoff.firstMs);
    run.nextOfferAt = Date.now() + run.offerBackoffMs;
    this.unplaced.add(run.id);
    this.armPlaceRetry();
  }

  private armPlaceRetry(): void {
    if (this.placeRetry || this.unplaced.size === 0 || this.stopping) return;
    this.placeRetry = setTimeout(() => {
      this.placeRetry = null;
      const now = Date.now();
      for (const id of [...this.unplaced]) {
        const waiting = this.runs.get(id);
        if (!waiting?.pending) this.unplaced.delete(id);
        else if (waiting.nextOfferAt <= now) {
          this.unplaced.delete(id);
          this.queue(waiting);
        }
      }
      this.armPlaceRetry();
    }, this.backoff.firstMs);
    this.placeRetry.unref();
  }

  /** The machine's `replace`: the node running it lost it or refused to start it; it waits to be placed again. */
  private replace(ctx: JobMachineContext, { node, reason, outcome }: { node: string; reason: string; outcome: 'lost' | 'refused' }): void {
    const run = this.run(ctx);
    // Not asked again, unless it is the one node the job may run on: then it waits for it.
    if (run.job.placement?.node !== node) run.exclude.add(node);
    // A start refused there never opened an attempt: it is recorded as one that ended at once.
    if (!closeAttempt(run.attempts, outcome, reason, node)) {
      const now = new Date().toISOString();
      run.attempts.push({ node, started_at: now, ended_at: now, outcome, reason });
    }
    const text = `${reason}; placing it again (${ctx.placements} of ${ctx.maxAttempts} placements used)`;
    run.job = { ...run.job, node: null, container_id: null };
    this.journal
      .change(run.id, { status: 'pending', reason: text, node: null, container_id: null, pending_reason: text, attempts: [...run.attempts] })
      .then(
        () => this.queue(run),
        (e: unknown) => this.log.error({ job: run.id, err: errorText(e) }, 'return to pending not stored'),
      );
  }

  /** A job that does not fit keeps waiting, and says what for. */
  private noteWaiting(run: JobRun, reason: string, what = 'waiting for resources'): void {
    const text = `${what}: ${reason}`;
    if (run.job.pending_reason === text) return;
    run.job = { ...run.job, pending_reason: text };
    this.journal.change(run.id, { pending_reason: text, reason: text }).catch((e: unknown) => {
      // A job that ended meanwhile has nothing to wait for: its refusal is moot.
      if (!(e instanceof DmsError && e.kind === 'conflict')) this.log.warn({ job: run.id, err: errorText(e) }, 'pending reason not stored');
    });
  }

  /** Image pulls report their steps in the job's events (the executor leaves progress ticks out). */
  private notePull(p: { job_id: string; status: string; id?: string }): void {
    const run = this.runs.get(p.job_id);
    if (!run) return;
    const reason = `pulling image ${run.job.image}: ${p.status}${p.id ? ` (${p.id})` : ''}`;
    this.journal.change(run.id, { reason }).catch((e: unknown) => this.log.debug({ job: run.id, err: errorText(e) }, 'pull step not stored'));
  }

  // --- resources -------------------------------------------------------------------------

  /** Gives a job's resources back; releases of one moment travel in one message. */
  private release(jobId: string): void {
    // The batch's own failure is logged where it is sent.
    void this.releases.add(jobId).catch(() => undefined);
  }

  private async sendReleases(ids: string[]): Promise<void> {
    try {
      await callBehavior(this.actor, this.manager, ResourceBehaviors.release, { job_ids: ids }, ReleaseReply);
    } catch (e) {
      this.log.warn({ err: errorText(e), jobs: ids.length }, 'resources not released');
    }
    this.resourcesFreed();
  }

  /**
   * Resources were freed here: every job waiting may fit now, those waiting for a node
   * included (asked here first; offered again to the network only when their turn comes).
   */
  private resourcesFreed(): void {
    for (const id of this.unplaced) {
      const run = this.runs.get(id);
      // Room here says nothing about a job that must run elsewhere: it waits for its next offer.
      if (!run?.pending || run.offering || this.aimedElsewhere(run)) continue;
      run.refusedIn = -1;
      this.scheduler.add(run);
    }
    this.scheduler.freed();
  }

  // --- start-up --------------------------------------------------------------------------

  async recover(): Promise<void> {
    const stored = await this.storage.jobs.list({ status: ['pending', 'running'] });
    // Jobs placed on other nodes are followed there again; the executors here know nothing of them.
    const open = stored.filter((job) => !this.remotely(job));
    const remote = stored.filter((job) => this.remotely(job));
    const findings = new Map<string, ExecutorFindings>();
    for (const name of new Set(open.map((j) => j.executor))) if (!this.executors.has(name)) findings.set(name, { absent: true });
    for (const executor of this.executors.all()) {
      const ids = open.filter((j) => j.executor === executor.name).map((j) => j.id);
      try {
        const report = await executor.reconcile(ids);
        findings.set(executor.name, { report });
        await this.removeOrphans(executor, report.orphans);
      } catch (e) {
        findings.set(executor.name, { error: errorText(e) });
        if (ids.length > 0) this.log.warn({ executor: executor.name, jobs: ids.length, err: errorText(e) }, 'cannot recover runs: executor unavailable');
      }
    }
    const plan = planRecovery(open, findings, (job) => this.unstartable(job));
    for (const job of plan.untracked) this.log.warn({ job: job.id }, 'running job left as it is: its executor cannot be asked now');

    if (plan.reattach.length > 0) {
      // They run already, so they hold their share whatever the manager would say now.
      const jobs = plan.reattach.map(({ job }) => ({ job_id: job.id, resources: job.resources }));
      await callBehavior(this.actor, this.manager, ResourceBehaviors.reserve, { jobs, force: true }, ReserveReply);
    }
    for (const { job, handle } of plan.reattach) {
      // Its timeout counts from when it began running, not from now.
      const since = job.timeout_s ? await this.runningSince(job) : undefined;
      this.track(job).send({ type: 'reattached', handle, since });
    }
    for (const { job, reason } of plan.lose) this.track(job).send({ type: 'lost', reason });
    for (const job of remote) {
      if (job.status === 'running') {
        const since = job.timeout_s ? await this.runningSince(job) : undefined;
        this.track(job).send({ type: 'reattached', handle: { executor: REMOTE_EXECUTOR, job_id: job.id, id: job.node! }, since, node: job.node! });
      } else {
        // Placed but not known to have started: its lease there runs out; it is placed anew.
        const reset = await this.journal.change(job.id, { node: null, reason: 'placed again after this node restarted' });
        this.queue(this.track(reset));
      }
    }
    for (const job of plan.queue) this.queue(this.track(job));
    if (stored.length > 0) {
      this.log.info({ reattached: plan.reattach.length, failed: plan.lose.length, pending: plan.queue.length, remote: remote.length }, 'jobs recovered');
    }
    this.scheduler.resume();
  }

  /** When the job last started running (now if it never did): its timeout counts from there. */
  private async runningSince(job: Job): Promise<number> {
    const events = await this.storage.events.listFor(job.id);
    const started = events.findLast((e) => e.to_status === 'running' && e.from_status === 'pending');
    return started ? Date.parse(started.at) : Date.now();
  }

  /** Runs left over from finished jobs (a crash between the end and the clean-up) are removed. */
  private async removeOrphans(executor: ExecutorClient, orphans: ExecutionHandle[]): Promise<void> {
    for (const handle of orphans) {
      const job = await this.storage.jobs.get(handle.job_id);
      if (job && isTerminal(job.status)) await executor.cleanup(handle);
      else this.log.info({ executor: executor.name, run: handle.id, job: handle.job_id }, 'left alone a run of an unknown job');
    }
  }
}


/** Ends the open attempt (on `node`, when given) with how it ended; false when none was open. */
function closeAttempt(attempts: Attempt[], outcome: NonNullable<Attempt['outcome']>, reason: string | null, node?: string): boolean {
  const open = attempts.at(-1);
  if (!open || open.ended_at !== null || (node !== undefined && open.node !== node)) return false;
  Object.assign(open, { ended_at: new Date().toISOString(), outcome, reason });
  return true;
}
