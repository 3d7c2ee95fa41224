/**
 * Runs jobs as Docker containers through the engine's API (dockerode). Containers carry
 * labels naming the job and the node, which is all a restarted node needs to find its work
 * again: nothing about a run lives only in this process's memory.
 */
import Docker from 'dockerode';
import { parseImageReference } from '../../behaviors/jobs/image-ref.js';
import type { Job } from '../../behaviors/jobs/schema.js';
import { type ContainerLimits, containerSpec, DEFAULT_CONTAINER_LIMITS, filesOf, JOB_LABEL, jobNetworkName, NODE_LABEL, PART_LABEL, type PartNetworks } from './container-spec.js';
import { formatBytes } from '../../runtime/bytes.js';
import { DmsError, errorText, invalid, notFound } from '../../runtime/errors.js';
import type { Logger } from '../../runtime/log.js';
import type { LogWriter } from './logfile.js';
import { StoredOutput } from './stored-output.js';
import type { OutputCollector } from './outputs.js';
import type { InputMounter } from './inputs.js';
import type { OutputSpec } from '../../behaviors/jobs/files.js';
import { OomEvents, oomVerdict } from './oom-events.js';
import { ContainerOutput } from './container-output.js';
import { Leftovers } from './leftovers.js';
import { graceFor } from './stop-signal.js';
import { StorageWatch, storageBound, storageBoundOf, volumeOver, volumesOf, type WatchedVolume } from './storage-watch.js';
import { answered, archiveOf, type Engine, ENGINE_ANSWER_MS, EngineSilent, engineMessage, exitOf, inspectImage, removeNetwork, statusOf } from './engine.js';
import { ImageCache, type ImageCacheOptions, ImageOverBound } from './image-cache.js';
import { makeOutputDirs } from './output-dirs.js';
import { PULL_QUIET_MS, pullImage } from './pull.js';
import { endOf, type MachineFactory, newRun, outcomeKnown, plainMachines, type RunMachine } from '../../behaviors/jobs/run-machine.js';
import type {
  ExecutionHandle,
  Executor,
  ExitResult,
  OutputContent,
  PullProgress,
  ReconcileReport,
  StartOptions,
} from '../../behaviors/jobs/execution.js';

export interface DockerExecutorOptions {
  /** Peer id of this node: several nodes may share one engine and must not take each other's containers. */
  nodeId: string;
  /** Where job output is written, one file per job. */
  logsDir: string;
  /** Output kept per job (`jobs.max_log_bytes`). */
  maxLogBytes?: number;
  /** Defaults to DOCKER_HOST, else /var/run/docker.sock. */
  docker?: Docker;
  /** How long a cancelled container gets to exit on SIGTERM before it is killed. */
  stopGraceSeconds?: number;
  /** How long a memory-limited container killed by SIGKILL is watched for signs of the OOM killer (`jobs.oom_settle_ms`). */
  oomSettleMs?: number;
  /** Limits every container gets, whatever its job asked for. */
  limits?: Partial<ContainerLimits>;
  /** Makes each run's machine: the executor actor's `ctx.machine`, so the node sees its steps. Default: plain xstate. */
  machine?: MachineFactory;
  /** Runs what follows one job's run (its capture and its wait) on that job's behalf: the executor guard's scope. */
  jobScope?: <T>(jobId: string, fn: () => T) => T;
  /** Collects a job's outputs when its container ends (./outputs.ts); without, outputs are not collected. */
  outputs?: OutputCollector;
  /** Fetches and mounts a job's inputs before its container is made (./inputs.ts); without, a job with inputs does not start. */
  inputs?: InputMounter;
  /** Gives an ensemble's part its networks and names, and takes them back (the ensemble-net actor); without, a part does not start. */
  ensembles?: EnsembleAttacher;
  /** How long one answer of the engine is waited for (./engine.ts); default ENGINE_ANSWER_MS. */
  engineAnswerMs?: number;
  /** How often a running container's writes are measured against its bound (./storage-watch.ts; default 5 s). */
  storageCheckMs?: number;
  /** Where the images this node pulls are recorded, and the bound on them (`jobs.max_images_bytes`, ./image-cache.ts); without, pulls are not bounded. */
  images?: Omit<ImageCacheOptions, 'engine' | 'log'>;
  /** How long a pull may go without a word from the engine, before its first and between two; default PULL_QUIET_MS. */
  pullQuietMs?: number;
  /** When a container the engine did not remove is asked again (default LEFTOVER_RETRY: 30 s, doubling to 10 min). */
  leftoverRetry?: { firstMs: number; maxMs: number };
  log?: Logger;
}

/** What the executor asks of the ensemble-net actor (README "Names between parts"). */
export interface EnsembleAttacher {
  attach(job: Job): Promise<PartNetworks>;
  detach(jobId: string): Promise<void>;
}

interface DockerRun {
  container: Docker.Container;
  /** Where the run is, why it is being stopped, how it ended (./run-machine.ts). */
  machine: RunMachine;
  /** Settles once the run is followed: at once for a run this process started; rejects when a container to pick up is gone. */
  ready: Promise<void>;
  /** The outputs to collect when it ends, and for whom (from the job, or the container's labels after a restart). */
  files?: { outputs: OutputSpec[]; requester: string | null };
  /** A part of an ensemble, whose networks are given back when its container goes. */
  part?: boolean;
  /**
   * Whether the job has a network of its own (jobNetworkName) to remove with it: known for a run
   * this process started or picked up; a run it knows nothing of has its removal tried.
   */
  network?: boolean;
  /** What it may write into its container and its writable volumes (./storage-watch.ts; no bound known for a container older than it), and why it was stopped when it wrote more. */
  storage: { bound?: number; volumes?: WatchedVolume[]; killed?: string };
}

export class DockerExecutor extends StoredOutput implements Executor {
  readonly name = 'docker';
  /** Its outputs are collected in watch(), before the end is told: a restarted node finds them by the container's labels. */
  readonly collectsOutputs = true;
  private readonly docker: Docker;
  /** The engine with the bound on each of its answers (./engine.ts). */
  private readonly engine: Engine;
  private readonly pullQuietMs: number;
  private readonly log: Logger | undefined;
  private readonly nodeId: string;
  private readonly stopGraceSeconds: number;
  private readonly oomSettleMs: number | undefined;
  private readonly storageCheckMs: number;
  private readonly limits: ContainerLimits;
  private readonly machines: MachineFactory;
  private readonly jobScope: <T>(jobId: string, fn: () => T) => T;
  /** The engine's `oom` events for this node's containers, followed between open() and close(). */
  private readonly oom: OomEvents;
  /** Runs this process follows, by container id. */
  private readonly runs = new Map<string, DockerRun>();
  /**
   * Images the engine had or pulled for a job here: the next job of one goes straight to
   * create, one engine round trip fewer before it runs (issue 25: a Docker job against the
   * same container driven by hand). An image removed since is pulled when create says it is
   * missing (createFor). Only names the engine held get in, and at most KNOWN_IMAGES of them.
   */
  private readonly knownImages = new Set<string>();
  private readonly outputs: OutputCollector | undefined;
  private readonly inputs: InputMounter | undefined;
  private readonly images: ImageCache | undefined;
  private readonly ensembles: EnsembleAttacher | undefined;
  /** Containers the engine did not remove when asked, asked again (./leftovers.ts). */
  private readonly leftovers: Leftovers;

  constructor(opts: DockerExecutorOptions) {
    super(opts.logsDir, opts.maxLogBytes);
    this.docker = opts.docker ?? new Docker();
    this.engine = { docker: this.docker, answerMs: opts.engineAnswerMs ?? ENGINE_ANSWER_MS };
    this.pullQuietMs = opts.pullQuietMs ?? PULL_QUIET_MS;
    this.log = opts.log;
    this.nodeId = opts.nodeId;
    this.stopGraceSeconds = opts.stopGraceSeconds ?? 10;
    this.oomSettleMs = opts.oomSettleMs;
    this.storageCheckMs = opts.storageCheckMs ?? 5_000;
    this.limits = { ...DEFAULT_CONTAINER_LIMITS, ...opts.limits };
    this.machines = opts.machine ?? plainMachines;
    this.jobScope = opts.jobScope ?? ((_, fn) => fn());
    this.oom = new OomEvents(this.docker, `${NODE_LABEL}=${this.nodeId}`, opts.log, this.engine.answerMs);
    this.outputs = opts.outputs;
    this.inputs = opts.inputs;
    this.images = opts.images && new ImageCache({ ...opts.images, engine: this.engine, log: opts.log });
    this.ensembles = opts.ensembles;
    this.leftovers = new Leftovers((id, jobId) => this.removeLeftover(id, jobId), opts.log, opts.leftoverRetry);
  }

  /** Starts following the engine's OOM events (the executor actor's start). Never fails: an absent engine is tried again. */
  /**
   * Follows the engine's oom events from now on, in the background: start-up waited for the
   * engine's answer, so an engine that never answered kept the node from ever serving. Until the
   * subscription is up, a run that dies is judged by the engine's history (OomEvents.covers).
   */
  open(): void {
    void this.oom.open();
  }

  close(): void {
    this.images?.close();
    this.oom.close();
    this.leftovers.close();
  }

  /** The engine's archive of the path in the run's stopped container (before cleanup removes it). */
  async readOutput(handle: ExecutionHandle, output: OutputSpec): Promise<OutputContent> {
    const run = this.runs.get(handle.id);
    return archiveOf(this.engine, run?.container ?? this.docker.getContainer(handle.id), output);
  }

  async start(job: Job, opts: StartOptions = {}): Promise<ExecutionHandle> {
    // The name becomes part of engine URL paths: nothing outside the reference grammar may get there,
    // whoever stored the job and whatever they checked.
    const ref = parseImageReference(job.image);
    if ('error' in ref) throw invalid(`image ${JSON.stringify(job.image)} is not a Docker image reference: ${ref.error}`);
    const machine = newRun(this.machines, job.id, 'pulling');
    const failed = (e: unknown) => {
      machine.send({ type: 'failed', error: errorText(e) });
      return e;
    };
    let binds: string[] = [];
    let volumes: WatchedVolume[] = [];
    // From its pull until its container uses it, no other job's pull removes the image.
    const releaseImage = this.images?.hold(job.image) ?? (() => undefined);
    try {
      // A run's output is its own: what a run of the job before left is kept as the previous
      // run's before anything can fail.
      await this.logStore.retire(job.id);
      if (!this.knownImages.has(job.image)) await this.ensureImage(job.image, opts.onProgress);
      this.images?.used(job.image);
      if (job.inputs?.length) {
        if (!this.inputs) throw new DmsError('unavailable', `job ${job.id} has inputs and this node cannot mount any`);
        ({ binds, volumes } = await this.inputs.prepare(job, (status) => opts.onProgress?.({ status, stage: 'inputs' })));
      }
      machine.send({ type: 'pulled' });
    } catch (e) {
      releaseImage();
      if (job.inputs?.length) await this.inputs?.release(job.id).catch(() => undefined);
      throw failed(e);
    }
    // The log is made while the engine makes the container (a few ms of every job's start, one
    // after the other) and exists before the container runs: not one byte of output can be
    // missed, and a log that cannot be made stops the job before it runs.
    const logged = this.logStore.create(job.id);
    logged.catch(() => undefined);
    let writer: LogWriter | undefined;
    let container: Docker.Container | undefined;
    const isPart = Boolean(job.ensemble && job.part);
    let network = false;
    try {
      let part: PartNetworks | undefined;
      if (isPart) {
        if (!this.ensembles) throw new DmsError('unavailable', `job ${job.id} is part ${job.part} of an ensemble and this node cannot give it the others' names`);
        part = await this.ensembles.attach(job);
      }
      const spec = containerSpec(job, this.nodeId, this.limits, binds, part, volumes);
      network = spec.HostConfig?.NetworkMode === jobNetworkName(job.id);
      if (network) await this.createJobNetwork(job.id);
      const made = await this.createFor(spec, job.image, opts.onProgress);
      container = made;
      releaseImage();
      if (job.outputs?.length) await makeOutputDirs(this.engine, made, job.outputs, this.log);
      // A container is created on one network; the ensemble's other slots are joined before it runs.
      for (const name of part?.networks.slice(1) ?? []) {
        await answered(this.engine, `joining network ${name}`, (abortSignal) => this.docker.getNetwork(name).connect({ Container: made.id, abortSignal } as Docker.NetworkConnectOptions));
      }
      writer = await logged;
      await answered(this.engine, 'starting the container', (abortSignal) => made.start({ abortSignal }));
    } catch (e) {
      releaseImage();
      writer ??= await logged.catch(() => undefined);
      const message = `job ${job.id} could not start: ${e instanceof DmsError ? e.message : engineMessage(e)}`;
      writer?.append('stderr', `[dms] ${message}\n`);
      await writer?.close();
      // What could not be taken back now is the start-up reconcile's to remove: the start's own
      // failure is what the job is told, not the clean-up's.
      const left = (e: unknown) => this.log?.warn({ job: job.id, err: errorText(e) }, 'what a failed start made is not removed');
      if (container) await this.remove(container, job.id).catch(left);
      if (network) await this.removeJobNetwork(job.id).catch(left);
      if (isPart) await this.ensembles?.detach(job.id).catch(() => undefined);
      if (job.inputs?.length) await this.inputs?.release(job.id).catch(left);
      throw failed(new DmsError('unavailable', message, { cause: e }));
    }
    machine.send({ type: 'created', id: container.id });
    const handle: ExecutionHandle = { executor: this.name, job_id: job.id, id: container.id };
    const storage = { bound: storageBound(job.resources.storage.size, this.limits.storageBytes), volumes };
    const run: DockerRun = { container, machine, ready: Promise.resolve(), files: { outputs: job.outputs ?? [], requester: job.requester }, part: isPart, network, storage };
    this.runs.set(handle.id, run);
    this.follow(handle, run, writer);
    return handle;
  }

  async wait(handle: ExecutionHandle): Promise<ExitResult> {
    return endOf((await this.ensureRun(handle)).machine);
  }

  async cancel(handle: ExecutionHandle, reason: string): Promise<void> {
    let run: DockerRun;
    try {
      run = await this.ensureRun(handle);
    } catch (e) {
      // A container that no longer exists no longer runs: there is nothing left to stop.
      if (e instanceof DmsError && e.kind === 'not_found') return;
      throw e;
    }
    // The first reason given is the one the result names.
    run.machine.send({ type: 'cancel', reason });
    // However the stop goes, the run ends (killed) once its result is in and its container gone.
    const over = outcomeKnown(run.machine)
      .then(() => this.remove(run.container, handle.job_id))
      .finally(() => run.machine.send({ type: 'stopped' }));
    try {
      const grace = await graceFor(this.engine, run.container, this.stopGraceSeconds);
      // The engine answers a stop once the grace period is over and the container gone.
      await answered({ answerMs: grace * 1000 + this.engine.answerMs }, 'stopping the container', (abortSignal) => run.container.stop({ t: grace, abortSignal }));
    } catch (e) {
      if (e instanceof EngineSilent) {
        // Whether it still runs, only the engine knows: the run is given up, saying why, and its
        // container left to the clean-up (or the next start-up's reconcile) to remove.
        run.machine.send({ type: 'lost', reason: e.message });
        await over.catch(() => undefined);
        return;
      }
      // 304: it had already stopped; 404: it is already gone. Either way it no longer runs.
      if (statusOf(e) !== 304 && statusOf(e) !== 404) {
        over.catch(() => undefined);
        throw e;
      }
    }
    await over;
  }

  async cleanup(handle: ExecutionHandle): Promise<void> {
    await this.remove(this.docker.getContainer(handle.id), handle.job_id);
    await this.inputs?.release(handle.job_id);
    const run = this.runs.get(handle.id);
    // Most jobs have none: asking the engine to remove one anyway was a refused call a job.
    if (run?.network !== false) await this.removeJobNetwork(handle.job_id);
    // Unknown to this process (left by an earlier one): the actor knows whether it was a part.
    if (!run || run.part) await this.ensembles?.detach(handle.job_id);
    if (run) {
      await endOf(run.machine).catch(() => undefined);
      this.runs.delete(handle.id);
    }
  }

  async reconcile(knownJobIds: readonly string[]): Promise<ReconcileReport> {
    // Bounded: the node's start waits for this answer, and an engine that never gave it kept the
    // node from serving for the call's hour. Unanswered, the runs are left as they are, said so.
    const containers = await answered({ answerMs: RECONCILE_ANSWER_MS }, "listing this node's containers", (abortSignal) =>
      this.docker.listContainers({ all: true, filters: { label: [`${NODE_LABEL}=${this.nodeId}`] }, abortSignal } as Docker.ContainerListOptions),
    ).catch((e: unknown) => {
      throw e instanceof EngineSilent ? e : new DmsError('unavailable', `the Docker engine did not list this node's containers: ${engineMessage(e)}`);
    });
    // Newest first, so if a job somehow has several containers the latest attempt wins.
    containers.sort((a, b) => b.Created - a.Created);
    const report: ReconcileReport = { reattached: [], missing: [], orphans: [] };
    const known = new Set(knownJobIds);
    const claimed = new Set<string>();
    for (const info of containers) {
      const jobId = info.Labels[JOB_LABEL] ?? '';
      const handle: ExecutionHandle = { executor: this.name, job_id: jobId, id: info.Id };
      if (!known.has(jobId) || claimed.has(jobId)) {
        report.orphans.push(handle);
        continue;
      }
      claimed.add(jobId);
      if (info.State === 'created') {
        // Created but never started: the previous process died in between. Starting it now
        // could run a job the orchestrator is about to fail, so it is removed instead.
        await this.remove(this.docker.getContainer(info.Id), jobId);
        report.missing.push({ job_id: jobId, reason: 'its container was created but never started before the node stopped' });
        continue;
      }
      try {
        await this.ensureRun(handle);
      } catch (e) {
        // Listed a moment ago, removed since (e.g. it was being removed).
        if (!(e instanceof DmsError && e.kind === 'not_found')) throw e;
        claimed.delete(jobId);
        continue;
      }
      const live = info.State === 'running' || info.State === 'paused' || info.State === 'restarting';
      report.reattached.push({ handle, state: live ? 'running' : 'exited' });
    }
    for (const jobId of knownJobIds) {
      if (!claimed.has(jobId)) report.missing.push({ job_id: jobId, reason: 'its container no longer exists' });
    }
    // A bound lowered since the last start is kept now; the node's start does not wait on the engine's removals.
    void this.images?.trim().catch((e: unknown) => this.log?.warn({ err: errorText(e) }, 'could not fit the pulled images to jobs.max_images_bytes'));
    return report;
  }

  /** The run followed for `handle`, picking a container back up if this process has not seen it. */
  private async ensureRun(handle: ExecutionHandle): Promise<DockerRun> {
    const run = this.runs.get(handle.id) ?? this.reattach(handle);
    await run.ready;
    return run;
  }

  /** Picks up a container a previous process of this node started. Two callers asking at once share the pick-up. */
  private reattach(handle: ExecutionHandle): DockerRun {
    const container = this.docker.getContainer(handle.id);
    const machine = newRun(this.machines, handle.job_id, 'attaching', handle.id);
    const run: DockerRun = { container, machine, ready: Promise.resolve(), storage: {} };
    run.ready = (async () => {
      let writer: LogWriter;
      try {
        const info = await answered(this.engine, `inspecting container ${handle.id}`, (abortSignal) => container.inspect({ abortSignal }));
        const labels = info.Config.Labels ?? {};
        run.files = filesOf(labels);
        run.part = PART_LABEL in labels;
        run.network = info.HostConfig?.NetworkMode === jobNetworkName(handle.job_id);
        run.storage = { bound: storageBoundOf(labels), volumes: volumesOf(labels) };
        // Docker keeps the whole output, so re-capturing from the start gives a complete log
        // even for what was written while no node was watching.
        writer = await this.logStore.create(handle.job_id);
      } catch (e) {
        const gone = statusOf(e) === 404;
        machine.send({ type: 'lost', reason: gone ? `container ${handle.id} of job ${handle.job_id} no longer exists` : engineMessage(e) });
        this.runs.delete(handle.id);
        throw gone ? notFound(`container ${handle.id} of job ${handle.job_id} no longer exists`) : e;
      }
      machine.send({ type: 'attached' });
      this.follow(handle, run, writer);
    })();
    // Whoever asked awaits it; nobody else may see it fail.
    run.ready.catch(() => undefined);
    this.runs.set(handle.id, run);
    return run;
  }

  /** Captures the run's output and waits for its end, on the job's behalf. */
  private follow(handle: ExecutionHandle, run: DockerRun, writer: LogWriter): void {
    this.jobScope(handle.job_id, () => {
      const output = new ContainerOutput(run.container, this.docker.modem, writer, engineMessage, this.engine.answerMs);
      const { bound, volumes = [] } = run.storage;
      // Stopped as a cancel is, its error saying why instead.
      const over = (reason: string) => {
        run.storage.killed = reason;
        this.cancel(handle, reason).catch((e: unknown) => this.log?.warn({ job: handle.job_id, err: errorText(e) }, 'a container past its storage bound not stopped'));
      };
      const writes = bound === undefined && volumes.length === 0 ? undefined : new StorageWatch(this.engine, run.container, bound, volumes, this.storageCheckMs, over);
      void this.watch(handle, run, output, output.follow()).finally(() => writes?.stop());
    });
  }

  /** Tells the run's machine how the run ended, once it exited and its output is fully in the log. */
  private async watch(handle: ExecutionHandle, run: DockerRun, output: ContainerOutput, followed: Promise<void>): Promise<void> {
    const { container, machine } = run;
    const cancelReason = () => machine.getSnapshot().context.cancelReason ?? undefined;
    let statusCode: number;
    try {
      // Only ever called after start(): a wait() issued before start returns at once with 0.
      statusCode = (await exitOf(this.engine, container)).StatusCode;
    } catch (e) {
      // Its output may still be coming, unless the engine went silent: then it is not waited for.
      if (e instanceof EngineSilent) output.stop(e);
      await followed;
      await output.close();
      const reason = statusOf(e) === 404 ? `container ${handle.id} of job ${handle.job_id} vanished while it ran` : engineMessage(e);
      machine.send({ type: 'lost', reason });
      return;
    }
    // The verdict's inspection goes while the output's last bytes are read: the end needs both,
    // neither needs the other, and one after the other they were a round trip to the engine
    // more on every job's end (bench:jobs b). A cancelled container was killed by us, not by
    // the OOM killer: nothing to wait for.
    const verdict = oomVerdict(container, cancelReason() ? 0 : statusCode, this.oom, this.oomSettleMs, this.engine.answerMs);
    // Awaited below, once the output is in; until then nobody may see it fail.
    verdict.catch(() => undefined);
    await output.followEnded(followed);
    await output.finish();
    try {
      const info = await verdict;
      // Before the end is told: the orchestrator stores the manifest with it, and removes the container after.
      if (this.outputs && run.files?.outputs.length) {
        const { outputs, requester } = run.files;
        await this.outputs.collect((output) => archiveOf(this.engine, container, output), { jobId: handle.job_id, requester, outputs, exitCode: info.State.ExitCode, logPath: this.logStore.path(handle.job_id) });
      }
      // What it wrote into a volume outlives its container: a job that went past a volume's size
      // between two checks fails for it all the same.
      if (!run.storage.killed && run.storage.volumes?.length) run.storage.killed = await volumeOver(run.storage.volumes);
      machine.send({ type: 'exited', result: exitResult(info, cancelReason(), run.storage.killed) });
    } catch (e) {
      if (statusOf(e) !== 404) {
        machine.send({ type: 'lost', reason: engineMessage(e) });
        return;
      }
      // Removed between exit and inspection (e.g. by hand): the exit code is all there is.
      const reason = cancelReason();
      machine.send({ type: 'exited', result: { exit_code: statusCode, oom_killed: false, ...(reason ? { error: `cancelled: ${reason}` } : {}) } });
    }
  }

  /**
   * Creates the container; an image known here but removed from the engine since (by hand, by
   * a prune) is pulled and the create tried once more, as if the job were its image's first.
   */
  private async createFor(spec: Docker.ContainerCreateOptions, image: string, onProgress?: (event: PullProgress) => void): Promise<Docker.Container> {
    try {
      return await this.create(spec);
    } catch (e) {
      const missing = statusOf(e) === 404 && /no such image/i.test(engineMessage(e));
      // Missing after a check or pull just now is the engine's answer to give.
      if (!missing || !this.knownImages.delete(image)) throw e;
    }
    await this.ensureImage(image, onProgress);
    return this.create(spec);
  }

  private create(spec: Docker.ContainerCreateOptions): Promise<Docker.Container> {
    // A copy: the client takes the signal off the options it is given.
    return answered(this.engine, 'creating the container', (abortSignal) => this.docker.createContainer({ ...spec, abortSignal } as Docker.ContainerCreateOptions));
  }

  private async ensureImage(image: string, onProgress?: (event: PullProgress) => void): Promise<void> {
    try {
      await inspectImage(this.engine, image);
      this.know(image);
      return;
    } catch (e) {
      if (statusOf(e) !== 404) throw e;
    }
    const watch = this.images?.pulling(image);
    try {
      await pullImage(this.docker, image, { quietMs: this.pullQuietMs, onProgress, guard: watch?.guard });
    } catch (e) {
      watch?.end();
      // Cut short by the bound: a pull whose end outran the cut leaves a whole image, which goes too.
      if (e instanceof ImageOverBound) await this.images?.forget(image);
      throw e;
    }
    watch?.end();
    // Before it is known: an image past the bound is removed again, and its job fails saying why.
    await this.images?.pulled(image);
    this.know(image);
  }

  private know(image: string): void {
    // Oldest first: a set keeps insertion order.
    if (this.knownImages.size >= KNOWN_IMAGES) this.knownImages.delete(this.knownImages.values().next().value!);
    this.knownImages.add(image);
  }

  /** `Internal`: the engine gives it no gateway out, so the job reaches nothing but itself while the host still reaches it. */
  private async createJobNetwork(jobId: string): Promise<void> {
    const name = jobNetworkName(jobId);
    try {
      await answered(this.engine, `making network ${name}`, (abortSignal) =>
        this.docker.createNetwork({ Name: name, Internal: true, Labels: { [JOB_LABEL]: jobId, [NODE_LABEL]: this.nodeId }, abortSignal } as Docker.NetworkCreateOptions),
      );
    } catch (e) {
      // 409: left by an earlier attempt of this job on this node, and as good.
      if (statusOf(e) !== 409) throw e;
    }
  }

  /** The job's own network, if the engine still has it. */
  private async removeJobNetwork(jobId: string): Promise<void> {
    // One still in use stays: its job's clean-up, or the next start-up's reconcile, takes it.
    await removeNetwork(this.engine, jobNetworkName(jobId));
  }

  /**
   * A container the engine did not remove, asked again as the clean-up would have: the container,
   * then what its job held, unless the job runs here again meanwhile (placed here again), whose
   * inputs and network are that run's.
   */
  private async removeLeftover(id: string, jobId: string): Promise<void> {
    const again = [...this.runs].some(([other, run]) => other !== id && run.machine.getSnapshot().context.jobId === jobId);
    if (again) await this.remove(this.docker.getContainer(id), jobId);
    else await this.cleanup({ executor: this.name, job_id: jobId, id });
  }

  /** Removes job `jobId`'s container; one the engine does not remove is asked again while the node runs (./leftovers.ts). */
  private async remove(container: Docker.Container, jobId: string): Promise<void> {
    try {
      await answered(this.engine, `removing container ${container.id}`, (abortSignal) => container.remove({ force: true, abortSignal }));
    } catch (e) {
      // 404: already gone; 409: removal already in progress. Both end where we want to be.
      if (statusOf(e) !== 404 && statusOf(e) !== 409) {
        this.leftovers.owe(container.id, jobId);
        throw e;
      }
    }
    this.leftovers.paid(container.id);
  }
}

/** Images remembered as present (DockerExecutor.knownImages): a node runs jobs of far fewer. */
const KNOWN_IMAGES = 256;
/** How long the engine may take to list this node's containers at start-up (reconcile). */
const RECONCILE_ANSWER_MS = 20_000;

function exitResult(info: Docker.ContainerInspectInfo, cancelReason: string | undefined, killed?: string): ExitResult {
  const result: ExitResult = { exit_code: info.State.ExitCode, oom_killed: info.State.OOMKilled };
  if (killed) return { ...result, error: `killed: ${killed}` };
  if (cancelReason) return { ...result, error: `cancelled: ${cancelReason}` };
  if (info.State.OOMKilled) {
    const limit = info.HostConfig.Memory;
    return { ...result, error: `killed: out of memory${limit ? ` (limit ${formatBytes(limit)})` : ''}` };
  }
  return result;
}

