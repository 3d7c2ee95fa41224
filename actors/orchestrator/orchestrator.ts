/**
 * The orchestrator actor (inbox `orchestrator`): accepts jobs, places them on this node when
 * the resource manager grants their resources, runs them through their executor and records
 * every step. Each job is a JobRun driven by the job machine (./machine.ts); this class
 * supplies the machine's effects. What a caller is told always comes from the database, and
 * every write goes through the journal (group commit), so nothing is acknowledged before it
 * is durable.
 */
import { setImmediate as nextTurn } from 'node:timers/promises';
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
import { callBehavior, localHandle, replyWhenDone } from '../../behaviors/jobs/replies.js';
import { EmptyPayload, ReleaseReply, ReserveReply, ResourceBehaviors, RESOURCES_INBOX, UsageReply } from '../../behaviors/jobs/resources.js';
import { redactJob } from '../../behaviors/jobs/redaction.js';
import { isTerminal, type Job, type JobSpec, type ResourceCapacity, type ResourceSpec } from '../../behaviors/jobs/schema.js';
import type { Actor } from '../../runtime/actor.js';
import { defineBehavior } from '../../runtime/behavior.js';
import { DmsError, errorText, invalid, notFound } from '../../runtime/errors.js';
import type { Logger } from '../../runtime/log.js';
import type { ActorSystem } from '../../runtime/system.js';
import type { Envelope, Handle } from '../../runtime/wire/envelope.js';
import { ownKeys } from '../../runtime/capability/authority.js';
import type { JobChange, Storage } from '../../storage/index.js';
import { withinJob } from '../executors/guard.js';
import type { ExecutorRegistry } from '../executors/registry.js';
import type { ExecutionHandle, Executor, PullProgress } from '../executors/types.js';
import { JobJournal } from './journal.js';
import { aborted, type LogSource } from './logs.js';
import { type JobMachineContext, jobMachine } from './machine.js';
import { type ExecutorFindings, planRecovery } from './recovery.js';
import { refusedRegistry } from './registries.js';
import { whyNoNodeCouldHold } from './placement.js';
import { type JobMachine, JobRun } from './run.js';
import { Scheduler } from './scheduler.js';

export interface OrchestratorOptions {
  storage: Storage;
  executors: ExecutorRegistry;
  log: Logger;
  /** What a job gets when it asks for zero cores or memory (`jobs.default_resources`). */
  defaultResources?: { cores: number; memory_bytes: number };
  /** Private registry hosts images may name (`jobs.allowed_registries`). */
  allowedRegistries?: readonly string[];
  /**
   * Whether an envelope's sender may see job environments: the node's own keys and its root
   * identities. Defaults to the node's own keys only.
   */
  trusted?: (env: Envelope) => boolean;
}

/** `jobs.default_resources` as shipped, for orchestrators built without a config (tests, benches). */
const DEFAULT_RESOURCES = { cores: 1, memory_bytes: 512 * 1024 * 1024 };

/** Most job ids one release message carries. */
const MAX_RELEASE = 5000;

export class Orchestrator {
  readonly actor: Actor;
  readonly journal: JobJournal;
  private readonly storage: Storage;
  private readonly executors: ExecutorRegistry;
  private readonly log: Logger;
  private readonly machine: JobMachine;
  private readonly scheduler: Scheduler;
  /** Jobs not yet finished, by id. A job leaves once its final state is committed. */
  private readonly runs = new Map<string, JobRun>();
  private readonly manager: Handle;
  /** Jobs whose resources go back to the manager with the next release message. */
  private readonly toRelease = new Set<string>();
  private releasing: Promise<void> | null = null;
  private stopping = false;
  private readonly defaults: { cores: number; memory_bytes: number };
  private readonly allowedRegistries: readonly string[];
  private readonly trusted: (env: Envelope) => boolean;
  /** This machine's capacity, as the resource manager measured it at start (it does not change while the node runs). */
  private capacity: Promise<ResourceCapacity> | null = null;

  private constructor(system: ActorSystem, opts: OrchestratorOptions) {
    this.storage = opts.storage;
    this.executors = opts.executors;
    this.log = opts.log;
    this.defaults = opts.defaultResources ?? DEFAULT_RESOURCES;
    this.allowedRegistries = opts.allowedRegistries ?? [];
    const own = ownKeys(system);
    this.trusted = opts.trusted ?? ((env) => own(env.from.id));
    this.journal = new JobJournal(opts.storage.jobs);
    this.machine = jobMachine.provide({
      actions: {
        start: ({ context }) => this.start(context),
        persistRunning: ({ context }) => this.persistRunning(context),
        watch: ({ context }) => this.watch(context),
        stop: ({ context }) => this.stop(context),
        finish: ({ context }, { status }) => this.finish(context, status),
      },
    });
    this.scheduler = new Scheduler(
      {
        reserve: (jobs) => callBehavior(this.actor, this.manager, ResourceBehaviors.reserve, { jobs }, ReserveReply),
        granted: (run) => run.send({ type: 'reserved' }),
        unwanted: (id) => this.release(id),
        refused: (run, reason) => this.noteWaiting(run, reason),
      },
      opts.log,
    );
    this.actor = system.spawn({ inbox: ORCHESTRATOR_INBOX, behaviors: this.behaviors() });
    this.manager = localHandle(this.actor, RESOURCES_INBOX);
  }

  /**
   * Starts the actor and recovers what a previous process left: runs still going are followed
   * again, runs that vanished fail with the reason, jobs that never started wait again. The
   * resource manager must already be running.
   */
  static async spawn(system: ActorSystem, opts: OrchestratorOptions): Promise<Orchestrator> {
    const orchestrator = new Orchestrator(system, opts);
    await orchestrator.recover();
    return orchestrator;
  }

  /** Stops placing and following jobs and waits for every write made so far. Runs are left running. */
  async halt(): Promise<void> {
    this.stopping = true;
    this.scheduler.halt();
    for (const run of this.runs.values()) run.halt();
    await this.journal.drain();
    await this.releasing;
    const { writes, commits } = this.journal.stats;
    this.log.info({ writes, commits }, 'job journal drained');
  }

  // --- behaviors -------------------------------------------------------------------------

  private behaviors() {
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
        name: JobBehaviors.schedule,
        payload: EmptyPayload,
        handle: () => {
          this.scheduler.freed();
          return {};
        },
      }),
    ];
  }

  private async submit(spec: JobSpec): Promise<Job> {
    if (this.stopping) throw new DmsError('unavailable', 'the node is stopping');
    if (!this.executors.has(spec.executor)) {
      throw invalid(`executor: no executor named "${spec.executor}" on this node (available: ${this.executors.names().join(', ')})`);
    }
    const refused = refusedRegistry(spec.image, this.allowedRegistries);
    if (refused) throw invalid(refused);
    const resources = this.withDefaults(spec.resources);
    // A job that could wait for resources to be freed is accepted; one no machine could ever hold would wait forever.
    const never = whyNoNodeCouldHold(resources, [{ label: 'this node', capacity: await this.machineCapacity() }]);
    if (never) throw new DmsError('conflict', never);
    // Stored with the defaults filled in: what the job holds, and is limited to, is on its record.
    const job = await this.journal.create({ ...spec, resources });
    this.scheduler.add(this.track(job));
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
          waits.push(source.executor.waitForLogs(source.handle, from, ac.signal).then((found) => (found ? undefined : quiet()), quiet));
        }
      }
      await Promise.race(waits);
    } finally {
      clearTimeout(timer);
      ac.abort();
    }
  }

  private logSource(job: Job, run: JobRun | undefined): LogSource | null {
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

  /**
   * Runs an executor call for `run` under the executor guard: a fault the call sets off where
   * nobody listens fails this job instead of the node.
   */
  private guarded<T>(run: JobRun, fn: () => Promise<T>): Promise<T> {
    return withinJob(run.id, (reason) => {
      run.send({ type: 'start_failed', error: reason });
      run.send({ type: 'lost', reason });
    }, fn);
  }

  // --- the machine's effects -------------------------------------------------------------

  private track(job: Job): JobRun {
    // Jobs stored before defaults applied still reserve (and are limited to) them.
    const run = new JobRun({ ...job, resources: this.withDefaults(job.resources) }, this.machine);
    this.runs.set(job.id, run);
    return run.start();
  }

  private run(ctx: JobMachineContext): JobRun {
    return this.runs.get(ctx.jobId)!;
  }

  private executorOf(run: JobRun): Executor {
    return this.executors.get(run.job.executor);
  }

  private start(ctx: JobMachineContext): void {
    const run = this.run(ctx);
    const onProgress = (p: PullProgress) => this.notePull(run, p);
    // A turn later: the machine is still in its transition while this action runs.
    this.guarded(run, () => Promise.resolve().then(() => this.executorOf(run).start(run.job, { onProgress }))).then(
      (handle) => {
        run.send({ type: 'started', handle });
        // The job was failed meanwhile (an executor fault): nothing may keep running for it.
        if (run.finished && run.handle === null) this.cleanup(run, handle);
      },
      (e: unknown) => run.send({ type: 'start_failed', error: errorText(e) }),
    );
  }

  private persistRunning(ctx: JobMachineContext): void {
    const run = this.run(ctx);
    const change: JobChange = { status: 'running', reason: ctx.reason, container_id: ctx.handle!.id, node: this.actor.system.host };
    this.journal.change(ctx.jobId, change).then(
      (job) => (run.job = job),
      (e: unknown) => this.log.error({ job: ctx.jobId, err: errorText(e) }, 'running state not stored'),
    );
  }

  /** Follows the run to its end, and stops it at its timeout. */
  private watch(ctx: JobMachineContext): void {
    const run = this.run(ctx);
    const handle = ctx.handle!;
    this.guarded(run, () => Promise.resolve().then(() => this.executorOf(run).wait(handle)))
      .then(
        (result) => run.send({ type: 'exited', result }),
        (e: unknown) => run.send({ type: 'lost', reason: `lost track of its run: ${errorText(e)}` }),
      );
    const timeout = run.job.timeout_s;
    if (timeout) {
      run.deadline ??= Date.now() + timeout * 1000;
      run.timer = setTimeout(() => run.send({ type: 'timed_out', after_s: timeout }), Math.max(0, run.deadline - Date.now()));
    }
  }

  private stop(ctx: JobMachineContext): void {
    const run = this.run(ctx);
    run.stopped = this.guarded(run, () => Promise.resolve().then(() => this.executorOf(run).cancel(ctx.handle!, ctx.stopReason!)))
      .catch((e: unknown) => this.log.warn({ job: ctx.jobId, err: errorText(e) }, 'could not stop run'));
  }

  /** Records the end; then the run's resources, container and waiters are let go. */
  private finish(ctx: JobMachineContext, status: 'completed' | 'failed'): void {
    const run = this.run(ctx);
    if (run.timer) clearTimeout(run.timer);
    this.scheduler.remove(ctx.jobId);
    this.release(ctx.jobId);
    const change: JobChange = {
      status,
      reason: ctx.reason,
      exit_code: ctx.exitCode,
      error: status === 'failed' ? (ctx.error ?? ctx.reason) : null,
    };
    this.journal.change(ctx.jobId, change).then(
      async (job) => {
        // A cancel answers once the run is really gone, not merely told to go.
        await run.stopped;
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
    Promise.resolve()
      .then(() => this.executorOf(run).cleanup(handle))
      .catch((e: unknown) => this.log.warn({ job: run.id, err: errorText(e) }, 'run not cleaned up'));
  }

  /** A job that does not fit keeps waiting, and says what for. */
  private noteWaiting(run: JobRun, reason: string): void {
    const text = `waiting for resources: ${reason}`;
    if (run.job.pending_reason === text) return;
    run.job = { ...run.job, pending_reason: text };
    this.journal.change(run.id, { pending_reason: text, reason: text }).catch((e: unknown) => {
      // A job that ended meanwhile has nothing to wait for: its refusal is moot.
      if (!(e instanceof DmsError && e.kind === 'conflict')) this.log.warn({ job: run.id, err: errorText(e) }, 'pending reason not stored');
    });
  }

  /** Image pulls report their steps in the job's events (progress ticks are left out). */
  private notePull(run: JobRun, p: PullProgress): void {
    if (p.current !== undefined || !p.status) return;
    const reason = `pulling image ${run.job.image}: ${p.status}${p.id ? ` (${p.id})` : ''}`;
    this.journal.change(run.id, { reason }).catch((e: unknown) => this.log.debug({ job: run.id, err: errorText(e) }, 'pull step not stored'));
  }

  // --- resources -------------------------------------------------------------------------

  /** Gives a job's resources back; releases of one moment travel in one message. */
  private release(jobId: string): void {
    this.toRelease.add(jobId);
    this.releasing ??= this.sendReleases();
  }

  private async sendReleases(): Promise<void> {
    await nextTurn();
    while (this.toRelease.size > 0) {
      const ids = [...this.toRelease].slice(0, MAX_RELEASE);
      for (const id of ids) this.toRelease.delete(id);
      try {
        await callBehavior(this.actor, this.manager, ResourceBehaviors.release, { job_ids: ids }, ReleaseReply);
      } catch (e) {
        this.log.warn({ err: errorText(e), jobs: ids.length }, 'resources not released');
      }
      this.scheduler.freed();
    }
    this.releasing = null;
  }

  // --- start-up --------------------------------------------------------------------------

  private async recover(): Promise<void> {
    const open = await this.storage.jobs.list({ status: ['pending', 'running'] });
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
      const run = this.track(job);
      if (job.timeout_s) run.deadline = (await this.runningSince(job)) + job.timeout_s * 1000;
      run.send({ type: 'reattached', handle });
    }
    for (const { job, reason } of plan.lose) this.track(job).send({ type: 'lost', reason });
    for (const job of plan.queue) this.scheduler.add(this.track(job));
    if (open.length > 0) {
      this.log.info({ reattached: plan.reattach.length, failed: plan.lose.length, pending: plan.queue.length }, 'jobs recovered');
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
  private async removeOrphans(executor: Executor, orphans: ExecutionHandle[]): Promise<void> {
    for (const handle of orphans) {
      const job = await this.storage.jobs.get(handle.job_id);
      if (job && isTerminal(job.status)) await executor.cleanup(handle);
      else this.log.info({ executor: executor.name, run: handle.id, job: handle.job_id }, 'left alone a run of an unknown job');
    }
  }
}

