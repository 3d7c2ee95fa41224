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
import { type EventObject, fromCallback, fromPromise } from 'xstate';
import type { z } from 'zod';
import { type RunReport, type StartReport } from '../../behaviors/jobs/executor.js';
import { type LogsReply, ORCHESTRATOR_INBOX } from '../../behaviors/jobs/jobs.js';
import { AcceptPayload, DEPLOYMENT_INBOX, DeploymentBehaviors, deployedJobOf, PlaceReply } from '../../behaviors/jobs/deployment.js';
import { type Freed, ReleaseReply, ReserveReply, ResourceBehaviors, RESOURCES_INBOX, UsageReply } from '../../behaviors/jobs/resources.js';
import { redactValues } from '../../behaviors/jobs/redaction.js';
import { isTerminal, JOB_STATUSES, type Job, type JobSpec } from '../../behaviors/jobs/schema.js';
import type { Actor } from '../../runtime/actor.js';
import { type ActorContext, defineActor } from '../../runtime/component.js';
import { DmsError, errorText, notFound } from '../../runtime/errors.js';
import type { Logger } from '../../runtime/log.js';
import { ownKeys } from '../../runtime/capability/authority.js';
import type { JobChange, Storage } from '../../storage/index.js';
import { ExecutorClients } from '../executors/clients.js';
import { REMOTE_EXECUTOR } from '../executors/remote.js';
import type { ExecutionHandle } from '../../behaviors/jobs/execution.js';
import { ExecutorClient } from './executors.js';
import { JobJournal } from './journal.js';
import { type JobState, type LogSource, OutputReader, stateOf } from './logs.js';
import {
  DEFAULT_OFFER_BACKOFF,
  type JobMachineContext,
  type JobMachineEvent,
  type JobMachineInput,
  jobMachine,
  type PlaceInput,
  type PlaceOutcome,
  type Route,
  type StopInput,
  timeoutClock,
} from './machine.js';
import { recoverJobs } from './recovery.js';
import { closeAttempt, type JobMachine, JobRun } from './run.js';
import { Scheduler } from './scheduler.js';
import { Admission, DEFAULT_RESOURCES } from './admission.js';
import { type UnfinishedLimits, UnfinishedJobs } from './unfinished.js';
import { orchestratorBehaviors } from './behaviors.js';
import { at, type Envelope, type Handle } from '../../runtime/wire/envelope.js';
import { JobReports } from './reports.js';
import { Batcher } from '../../runtime/batcher.js';
import { rememberNewest } from '../../runtime/bounded-map.js';
import type { ManifestFiles } from '../outputs/manifest-files.js';

export interface OrchestratorDeps {
  storage: Storage;
  /** Names of this node's executor actors (inboxes `executor/<name>`): the executors a job may name. */
  executors: readonly string[];
  /** What a job gets when it asks for zero cores or memory (`jobs.default_resources`). */
  defaultResources?: { cores: number; memory_bytes: number };
  /** Private registry hosts images may name (`jobs.allowed_registries`). */
  allowedRegistries?: readonly string[];
  /** Whether an envelope's sender may see job environments: its root identities, and (the default) the node's own keys. */
  trusted?: (env: Envelope) => boolean;
  /**
   * How many peers are connected now. With any, a job this node cannot hold now (or whose
   * placement asks for another node, a location or labels) is placed on the network through
   * the deployment actor and followed through the remote executor (`executor/remote`).
   * Absent: jobs never leave this node.
   */
  peers?: () => number;
  /** Calls `fn` when a peer connects (a job waiting for a node is then offered again); returns the unsubscribe. */
  onPeerJoined?: (fn: () => void) => () => void;
  /** The offer back-off: first wait and bound (`deployment.offer_retry_ms`, `deployment.max_offer_backoff_ms`). */
  offerBackoff?: { firstMs: number; maxMs: number };
  /** Signed result manifests written by the executors, stored with a job's end (actors/outputs). */
  manifests?: ManifestFiles;
  /** What submissions may bring the jobs not yet ended to (`jobs.max_unfinished`, `jobs.max_unfinished_bytes`; ./unfinished.ts). */
  unfinished?: UnfinishedLimits;
}

/** Longest a placement (offer, bids, reservation) may take. */
const PLACE_TTL_MS = 30_000;
/** Most job ids one release message carries. */
const MAX_RELEASE = 5000;
/** Final states kept after the end (./logs.ts JobState: a few hundred bytes each): the follower's last read comes within moments. */
const JUST_ENDED = 256;

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
  readonly storage: Storage;
  /** The executor actors, each as the client that asks it by envelopes. */
  private readonly executors = new ExecutorClients<ExecutorClient>();
  /** Executors jobs may name (the remote executor is not one: it follows jobs, it does not run them). */
  private readonly runnable: ReadonlySet<string>;
  private readonly remote: ExecutorClient | null;
  private readonly peers: () => number;
  private readonly backoff: { firstMs: number; maxMs: number };
  /** When waiting jobs were last woken by a peer joining: joins wake them at most once per longest back-off. */
  private peerWokeAt = 0;
  private readonly unsubscribePeers: () => void;
  private readonly log: Logger;
  private readonly reports: JobReports;
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
  readonly trusted: (env: Envelope) => boolean;
  private readonly admission: Admission;
  private readonly output: OutputReader;
  /** The final states of the jobs that ended last, oldest first: a follower's last read of a short job comes just after its end, and would read the database. */
  private readonly justEnded = new Map<string, JobState>();
  private readonly manifests: ManifestFiles | undefined;
  private readonly unfinished: UnfinishedJobs;

  constructor({ actor, system, log, deps, machine }: ActorContext<OrchestratorDeps>) {
    this.actor = actor;
    this.storage = deps.storage;
    this.manifests = deps.manifests;
    this.unfinished = new UnfinishedJobs(deps.unfinished);
    this.log = log;
    this.reports = new JobReports(actor, log);
    this.makeMachine = machine;
    for (const name of deps.executors) this.executors.register(new ExecutorClient(actor, name));
    this.runnable = new Set(deps.executors);
    this.remote = deps.peers ? new ExecutorClient(actor, REMOTE_EXECUTOR) : null;
    if (this.remote) this.executors.register(this.remote);
    this.peers = deps.peers ?? (() => 0);
    this.backoff = deps.offerBackoff ?? DEFAULT_OFFER_BACKOFF;
    this.unsubscribePeers = deps.onPeerJoined?.(() => this.peerJoined()) ?? (() => {});
    this.admission = new Admission({
      runnable: this.runnable,
      allowedRegistries: deps.allowedRegistries ?? [],
      defaults: deps.defaultResources ?? DEFAULT_RESOURCES,
      isHere: (host) => system.isHere(host),
      mayLeave: (spec) => this.remote !== null && (this.peers() > 0 || spec.placement?.node !== undefined),
      capacity: async () => (await this.actor.call(this.manager, ResourceBehaviors.usage, {}, UsageReply)).capacity,
    });
    const own = ownKeys(system);
    this.trusted = deps.trusted ?? ((env) => own(env.from.id));
    this.journal = new JobJournal(deps.storage.jobs);
    this.output = new OutputReader(this.runs, this.justEnded, deps.storage, (job, run) => this.logSource(job, run));
    this.machine = jobMachine.provide({
      actors: {
        stop: fromCallback<EventObject, StopInput>(({ input, sendBack }) => this.stop(input, sendBack)),
        place: fromPromise<PlaceOutcome, PlaceInput>(({ input, signal }) => this.place(input, signal)),
      },
      actions: {
        start: ({ context }) => this.start(context),
        enqueue: ({ context }) => this.scheduler.add(this.run(context)),
        dequeue: ({ context }) => this.scheduler.remove(context.jobId),
        noteWaiting: ({ context }, { reason }) => this.noteWaiting(this.run(context), reason),
        placedOn: ({ context }, { node }) => this.placedOn(this.run(context), node),
        giveBack: ({ context }) => this.release(context.jobId),
        persistRunning: ({ context }) => this.persistRunning(context),
        watch: ({ context }) => this.watch(context),
        finish: ({ context }, { status }) => this.finish(context, status),
        replace: ({ context }, params) => this.replace(context, params),
        noteRefused: ({ context }, { node, reason }) => {
          const now = new Date().toISOString();
          this.run(context).attempts.push({ node, started_at: now, ended_at: now, outcome: 'refused', reason });
        },
      },
    });
    this.scheduler = new Scheduler(
      {
        reserve: (jobs) => this.actor.call(this.manager, ResourceBehaviors.reserve, { jobs }, ReserveReply),
        granted: (run) => {
          system.metrics?.placements.labels('placed').inc();
          run.send({ type: 'reserved' });
        },
        unwanted: (id) => this.release(id),
        // Not here, not now: the machine decides whether the network is asked (./machine.ts).
        refused: (run, reason) => run.send({ type: 'refused', reason, peers: this.stopping ? 0 : this.peers() }),
      },
      log,
    );
    this.manager = actor.local(RESOURCES_INBOX);
  }

  /** Stops placing and following jobs and waits for every write made so far. Runs are left running. */
  async halt(): Promise<void> {
    this.stopping = true;
    this.scheduler.halt();
    this.unsubscribePeers();
    for (const run of this.runs.values()) run.halt();
    await this.journal.drain();
    await this.releases.drain();
    const { writes, commits } = this.journal.stats;
    this.log.info({ writes, commits }, 'job journal drained');
  }

  // --- behaviors (./behaviors.ts) ---------------------------------------------------------

  behaviors() {
    return orchestratorBehaviors(this);
  }

  async submit(spec: JobSpec, part?: { ensemble: string; part: string; job_id: string }): Promise<Job> {
    if (this.stopping) throw new DmsError('unavailable', 'the node is stopping');
    return this.unfinished.admit(spec, async () => {
      const resources = await this.admission.submitted(spec);
      // Stored with the defaults filled in: what the job holds, and is limited to, is on its record.
      const job = await this.journal.create({ ...spec, resources }, part ? { id: part.job_id, ensemble: { id: part.ensemble, part: part.part } } : undefined);
      this.track(job);
      return job;
    });
  }

  /** A held part of an ensemble goes to `node`, where its ensemble reserved its share. */
  assign(jobId: string, node: string): void {
    const run = this.runs.get(jobId);
    if (!run || !run.job.ensemble) throw notFound(`no part of an ensemble waits as job ${jobId}`);
    if (!run.held) throw new DmsError('conflict', `job ${jobId} is not waiting for its ensemble to place it`);
    run.send({ type: 'assigned', node, here: this.actor.system.isHere(node) });
  }

  /** A job's stored status or node changed: the actors that follow jobs hear of it (./reports.ts). */
  private changed(run: JobRun, job: Job): void {
    this.reports.changed(job, () => run.machine.getSnapshot().context.exclude);
  }

  /** A job another node placed here (its reservation is held): run as one of this node's own, never passed on. */
  async accept(spec: z.output<typeof AcceptPayload>['job'], requester: string): Promise<Job> {
    if (this.stopping) throw new DmsError('unavailable', 'the node is stopping');
    await this.admission.accepted(spec);
    const { id, ensemble, ...rest } = spec;
    // Whatever the requester sent, the job runs within this node's defaults and limits.
    // Its secrets are kept in memory only, for the start: the record shows their names.
    // Placed here again by its requester, it replaces its ended run's record, once that run is over (storage/job-rules.ts takenId).
    const job = await this.journal.create({ ...rest, secrets: redactValues(rest.secrets ?? {}), resources: this.admission.withDefaults(rest.resources, rest.executor) }, { id, requester, ensemble, again: true });
    this.track(job, { secrets: rest.secrets });
    return job;
  }

  /** Resolves with the failed job once its end is committed. */
  async cancel(id: string, reason?: string): Promise<Job> {
    const why = reason ? `cancelled: ${reason}` : 'cancelled';
    const run = this.runs.get(id);
    if (run) {
      if (!run.finished) {
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
    const ended = await this.journal.change(id, { status: 'failed', reason: why, error: why });
    this.reports.ended(ended);
    return ended;
  }

  /** A page of output (./logs.ts). */
  logs(p: Parameters<OutputReader['read']>[0]): Promise<LogsReply> {
    return this.output.read(p);
  }

  private logSource(job: JobState, run: JobRun | undefined): LogSource | null {
    if (this.remotely(job)) return { executor: this.remote!, handle: run?.handle ?? { executor: REMOTE_EXECUTOR, job_id: job.id, id: job.node! } };
    if (!this.executors.has(job.executor)) return null;
    const handle: ExecutionHandle = run?.handle ?? { executor: job.executor, job_id: job.id, id: job.container_id ?? job.id };
    return { executor: this.executors.get(job.executor), handle };
  }

  // --- the machine's effects -------------------------------------------------------------

  /**
   * Makes the job's machine and starts it: a new job goes where its route says at once; one
   * picked up after a restart (`recovering`) waits for what recovery found of its run.
   */
  private track(job: Job, opts: { secrets?: Record<string, string>; recovering?: boolean } = {}): JobRun {
    const placements = job.attempts.filter((a) => !this.actor.system.isHere(a.node)).length;
    const p = job.placement;
    const pinned = p?.node ?? null;
    const input: JobMachineInput = {
      jobId: job.id,
      timeoutS: job.timeout_s,
      maxAttempts: p?.max_attempts ?? 3,
      placements,
      route: this.routeOf(job),
      pinned: pinned !== null && !this.actor.system.isHere(pinned) ? pinned : null,
      backoff: this.backoff,
      recovering: opts.recovering ?? false,
    };
    const machine = this.makeMachine(this.machine, { id: job.id, input, clock: timeoutClock });
    // Jobs stored before defaults applied still reserve (and are limited to) them.
    const run = new JobRun({ ...job, resources: this.admission.withDefaults(job.resources, job.executor) }, machine);
    if (opts.secrets) run.secrets = opts.secrets;
    this.runs.set(job.id, run);
    this.unfinished.held(job, opts.secrets);
    return run.start();
  }

  /**
   * Where the job goes to be placed: here when run here for another node, local, pinned here, or
   * with no network; straight to the network's bids (this node's own among them) when it names a
   * node, a location or labels, or asks more than this node's whole share; else here first.
   */
  private routeOf(job: Job): Route {
    const p = job.placement;
    if (job.ensemble !== null && job.requester === null) return 'ensemble';
    if (this.remote === null || job.requester !== null || p?.local === true || (p?.node !== undefined && this.actor.system.isHere(p.node))) return 'here';
    const aimed = p?.node !== undefined || p?.location !== undefined || p?.labels !== undefined;
    return aimed || (this.peers() > 0 && this.scheduler.beyondShare(job.resources) !== null) ? 'network' : 'here-first';
  }

  private run(ctx: { jobId: string }): JobRun {
    return this.runs.get(ctx.jobId)!;
  }

  /** Whoever runs it: its executor here, or the remote executor following it on another node. */
  private executorOf(run: JobRun): ExecutorClient {
    return this.remotely(run.job) ? this.remote! : this.executors.get(run.job.executor);
  }

  /** Placed on another node (this node follows it there). */
  private remotely(job: Pick<Job, 'node' | 'requester'>): boolean {
    return this.remote !== null && job.node !== null && job.requester === null && !this.actor.system.isHere(job.node);
  }

  /** The machine's `start`: asks the executor; `starting` waits for its report (started()) or the `fault` sent here. */
  private start(ctx: JobMachineContext): void {
    const run = this.run(ctx);
    const refused = ctx.placedStart?.start_refused;
    if (refused) return queueMicrotask(() => run.send({ type: 'fault', reason: refused }));
    // Started with its reserve: its run exists there, and the remote executor only follows it (its id names the provider).
    const job = ctx.placedStart?.started ? { ...run.job, container_id: run.job.node } : run.job;
    this.executorOf(run)
      .start(run.secrets ? { ...job, secrets: run.secrets } : job)
      .catch((e: unknown) => run.send({ type: 'fault', reason: errorText(e) }));
  }

  /** An executor reported how starts went. */
  started(reports: StartReport[]): void {
    for (const report of reports) {
      const run = this.runs.get(report.job_id);
      if ('error' in report) run?.send({ type: 'fault', reason: report.error });
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
      (job) => {
        run.job = job;
        this.changed(run, job);
      },
      (e: unknown) => this.log.error({ job: ctx.jobId, err: errorText(e) }, 'running state not stored'),
    );
  }

  /** Asks the executor to report the run's end (/dms/job/exited, see exited()). */
  private watch(ctx: JobMachineContext): void {
    const run = this.run(ctx);
    this.executorOf(run)
      .watch(ctx.handle!)
      .catch((e: unknown) => run.send({ type: 'fault', reason: `lost track of its run: ${errorText(e)}` }));
  }

  /** The invoked `stop`: the run is stopped (cancel, timeout); answers once it is gone. */
  private stop(input: StopInput, sendBack: (event: JobMachineEvent) => void): void {
    this.executors
      .get(input.handle.executor)
      .cancel(input.handle, input.reason)
      .then(
        // However it ended, it is gone; without a result it is gone without one.
        ({ result, lost }) => sendBack(result ? { type: 'exited', result } : { type: 'fault', reason: lost ?? input.reason }),
        // Its end may still be reported; until then the job stays stopping.
        (e: unknown) => this.log.warn({ job: input.jobId, err: errorText(e) }, 'could not stop run'),
      );
  }

  /** An executor reported runs' ends, or that it can no longer follow them (a fault, a vanished container). */
  exited(reports: RunReport[]): void {
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
    // While starting it fails the start, later it loses the run: the machine's state says which.
    run.send({ type: 'fault', reason: report.lost });
  }

  /** Records the end; then the run's resources, container and waiters are let go. */
  private finish(ctx: JobMachineContext, status: 'completed' | 'failed'): void {
    const run = this.run(ctx);
    if (run.runningSince !== null) this.actor.system.metrics?.runSeconds.labels(run.job.executor, status).observe((performance.now() - run.runningSince) / 1000);
    this.release(ctx.jobId);
    const error = status === 'failed' ? (ctx.error ?? ctx.reason) : null;
    const closed = closeAttempt(run.attempts, ctx.lost ? 'lost' : status, ctx.lost ?? error);
    const change: JobChange = { status, reason: ctx.reason, exit_code: ctx.exitCode, error, ...(closed || run.attempts.length > 0 ? { attempts: [...run.attempts] } : {}) };
    const manifest = run.job.outputs.length > 0 ? this.manifests?.recordOf(run.job) : undefined;
    if (manifest?.refused) this.log.warn({ job: run.id, node: run.job.node, err: manifest.refused }, 'result manifest refused');
    Object.assign(change, manifest?.file ?? {});
    // Run here for another node: its deployment is over.
    if (run.job.requester) {
      void this.actor.tell(this.actor.local(DEPLOYMENT_INBOX), DeploymentBehaviors.ended, { job_id: ctx.jobId }).catch(() => undefined);
    }
    // Ending: it no longer counts against what submissions may add, however its end is stored.
    this.unfinished.ended(ctx.jobId);
    this.journal.change(ctx.jobId, change).then(
      (job) => {
        this.runs.delete(ctx.jobId);
        rememberNewest(this.justEnded, job.id, stateOf(job), JUST_ENDED);
        run.end({ job });
        this.changed(run, job);
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
    this.executorOf(run).cleanup(handle).catch((e: unknown) => this.log.warn({ job: run.id, err: errorText(e) }, 'run not cleaned up'));
  }

  // --- placement (the machine's `pending` states, ./machine.ts) --------------------------

  /** The invoked `place`: asks the deployment actor for bids and a reservation. */
  private async place({ jobId, exclude }: PlaceInput, signal: AbortSignal): Promise<PlaceOutcome> {
    const { job } = this.run({ jobId });
    const secrets = Object.keys(job.secrets).length > 0;
    // Started with its reserve: one round trip. Secrets wait for the remote executor's own check of the provider.
    const start = this.remote && !secrets ? { start: deployedJobOf(job) } : {};
    const request = { job_id: job.id, resources: job.resources, executor: job.executor, placement: job.placement, exclude: [...exclude], secrets, ...start };
    const reply = await this.actor
      .call(this.actor.local(DEPLOYMENT_INBOX), DeploymentBehaviors.place, request, PlaceReply, { ttlMs: PLACE_TTL_MS })
      .catch((e: unknown): PlaceReply => ({ waiting: `placement failed: ${errorText(e)}` }));
    if ('waiting' in reply) return reply;
    const here = this.actor.system.isHere(reply.node);
    // Cancelled (or the node stopping) meanwhile: the reservation there is let go rather than left to run out.
    if ((signal.aborted || this.stopping) && !here) {
      void this.actor.tell(at(DEPLOYMENT_INBOX, reply.node), DeploymentBehaviors.release, { job_id: jobId }).catch(() => undefined);
    }
    return { ...reply, here };
  }

  /** The machine's `placedOn`: reserved on `node`; recorded there, then started through the remote executor. */
  private placedOn(run: JobRun, node: string): void {
    this.actor.system.metrics?.placements.labels('placed').inc();
    // Recorded, not waited for: the record is history (journal writes keep their order, so it
    // comes before the running one), and a requester that restarts before the job runs places
    // it anew whatever it says.
    this.journal.change(run.id, { node, reason: `placed on node ${node}`, pending_reason: null }).catch((e: unknown) => {
      this.log.warn({ job: run.id, err: errorText(e) }, 'placement not stored');
    });
    run.job = { ...run.job, node, pending_reason: null };
  }

  /**
   * A peer connected: jobs waiting for a node, and those refused here while nobody was there to
   * take them, are offered now. At most once per longest back-off: a peer that connects over
   * and over (or many identities) then costs no more offers than the back-off itself allows.
   */
  private peerJoined(): void {
    const now = Date.now();
    if (this.stopping || now - this.peerWokeAt < this.backoff.maxMs) return;
    this.peerWokeAt = now;
    for (const run of this.runs.values()) if (run.waiting) run.send({ type: 'peer_joined' });
  }

  /** The machine's `replace`: the node running it lost it or refused to start it; it waits to be placed again. */
  private replace(ctx: JobMachineContext, { node, reason, outcome }: { node: string; reason: string; outcome: 'lost' | 'refused' }): void {
    const run = this.run(ctx);
    // A start refused there never opened an attempt: it is recorded as one that ended at once.
    if (!closeAttempt(run.attempts, outcome, reason, node)) {
      const now = new Date().toISOString();
      run.attempts.push({ node, started_at: now, ended_at: now, outcome, reason });
    }
    const text = `${reason}; placing it again (${ctx.placements} of ${ctx.maxAttempts} placements used)`;
    run.job = { ...run.job, status: 'pending', node: null, container_id: null, pending_reason: text };
    // Journal writes keep their order: this one is stored before whatever its next placement writes.
    this.journal
      .change(run.id, { status: 'pending', reason: text, node: null, container_id: null, pending_reason: text, attempts: [...run.attempts] })
      .then((job) => this.changed(run, job))
      .catch((e: unknown) => this.log.error({ job: run.id, err: errorText(e) }, 'return to pending not stored'));
  }

  /** A job that cannot be placed now keeps waiting, and says what for. */
  private noteWaiting(run: JobRun, text: string): void {
    this.actor.system.metrics?.placements.labels('waiting').inc();
    if (run.job.pending_reason === text) return;
    run.job = { ...run.job, pending_reason: text };
    this.journal.change(run.id, { pending_reason: text, reason: text }).catch((e: unknown) => {
      // A job that ended meanwhile has nothing to wait for: its refusal is moot.
      if (!(e instanceof DmsError && e.kind === 'conflict')) this.log.warn({ job: run.id, err: errorText(e) }, 'pending reason not stored');
    });
  }

  /** Image pulls and input fetches report their steps in the job's events (the executor leaves progress ticks out). */
  notePull(p: { job_id: string; status: string; id?: string; stage?: 'image' | 'inputs' }): void {
    const run = this.runs.get(p.job_id);
    if (!run) return;
    const reason = p.stage === 'inputs' ? p.status : `pulling image ${run.job.image}: ${p.status}${p.id ? ` (${p.id})` : ''}`;
    this.journal.change(run.id, { reason }).catch((e: unknown) => this.log.debug({ job: run.id, err: errorText(e) }, 'pull step not stored'));
  }

  // --- resources -------------------------------------------------------------------------

  /** Gives a job's resources back; releases of one moment travel in one message. */
  private release(jobId: string): void {
    // The batch's own failure is logged where it is sent.
    void this.releases.add(jobId).catch(() => undefined);
  }

  private async sendReleases(ids: string[]): Promise<void> {
    let now: Freed = {};
    try {
      now = await this.actor.call(this.manager, ResourceBehaviors.release, { job_ids: ids }, ReleaseReply);
    } catch (e) {
      this.log.warn({ err: errorText(e), jobs: ids.length }, 'resources not released');
    }
    this.resourcesFreed(now);
  }

  /**
   * Resources were freed here (`now`: what the manager says is free, when it said): every job
   * waiting may fit now, those waiting for a node included (asked here first; offered again
   * to the network only when their turn comes).
   */
  resourcesFreed(now: Freed): void {
    for (const run of this.runs.values()) if (run.unplaced) run.send({ type: 'resources_freed' });
    this.scheduler.freed(now);
  }

  // --- start-up --------------------------------------------------------------------------

  /** Start-up recovery (./recovery.ts): what a previous process left is followed, failed or queued again. */
  async recover(): Promise<void> {
    await recoverJobs({
      storage: this.storage,
      executors: this.executors,
      log: this.log,
      remotely: (job) => this.remotely(job),
      unstartable: (job) => this.admission.unstartable(job),
      hold: async (jobs) => void (await this.actor.call(this.manager, ResourceBehaviors.reserve, { jobs, force: true }, ReserveReply)),
      track: (job, recovering) => this.track(job, { recovering }),
      journal: this.journal,
    });
    this.scheduler.resume();
  }
}

