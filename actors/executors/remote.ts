/**
 * The follower of jobs placed on other nodes, as this node (their requester) sees them: an
 * executor actor (inbox `executor/remote`, the executor contract) that no job can name. Its
 * "run" is the job on the provider: start asks the provider's deployment actor to start what it
 * reserved, and a follower long-polls the provider for the job's state and output, copying
 * every chunk into this node's own log store, so reading, following and keeping the output
 * work here exactly as for a local job. The poll is the heartbeat too: a provider that cannot
 * be reached for LOST_AFTER_MS loses the run, and the orchestrator places the job again.
 *
 * Each followed run is the same run machine local executors drive (behaviors/jobs/run-machine.ts,
 * `executor-run` on the node's stream): creating while the provider is asked to start it,
 * attaching when picked up after a restart, running while followed, stopping once cancelled,
 * and its end (exited, killed, lost) is what the orchestrator is told.
 *
 * A provider is believed about its own jobs only (replies are bound to the node asked), and
 * not for ever: one that still reports a job running `cancelBoundMs` after its cancel has
 * ignored it. The run is then lost (the job, cancelled, fails) and the node is excluded from
 * placements for a while. A job's `secrets` go only to providers this node trusts.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { DeploymentBehaviors, DEPLOYMENT_INBOX, deployedJobOf, type DeployedJob, StartReply } from '../../behaviors/jobs/deployment.js';
import { LogsReply } from '../../behaviors/jobs/jobs.js';
import type { Job } from '../../behaviors/jobs/schema.js';
import { JobSchema } from '../../behaviors/jobs/schema.js';
import type { Actor } from '../../runtime/actor.js';
import { DmsError, errorText, invalid } from '../../runtime/errors.js';
import { CancelOutbox, type CancelStore } from './cancel-outbox.js';
import { withRetries } from '../../runtime/retry.js';
import type { Handle } from '../../runtime/wire/envelope.js';
import { type ProviderTrust, untrustedReason } from '../orchestrator/trust.js';
import type { ExecutorImplementation } from '../../behaviors/jobs/execution.js';
import type { LogWriter } from './logfile.js';
import { endOf, type MachineFactory, newRun, plainMachines, type RunMachine } from '../../behaviors/jobs/run-machine.js';
import { StoredOutput } from './stored-output.js';
import type { ExecutionHandle, ExitResult, ReconcileReport } from '../../behaviors/jobs/execution.js';
import { at } from '../../runtime/wire/envelope.js';
import { fetchManifest } from '../outputs/actor.js';
import type { ManifestFiles } from '../outputs/manifest-files.js';

export const REMOTE_EXECUTOR = 'remote';

/** How long the provider holds each poll open when there is no news. */
const POLL_WAIT_MS = 5_000;
/** A provider unanswered this long has lost the run (the README states the bound with the poll's own timeout). */
export const LOST_AFTER_MS = 10_000;
/** Pause between polls that failed. */
const RETRY_MS = 500;
/** Output read per poll. */
const PAGE_BYTES = 1024 * 1024;
/** Pause between polls once this node's copy of the output is cut: what they bring is dropped, and only the end is waited for. */
const CUT_PACE_MS = 100;
const CALL_TTL_MS = 5_000;
/** Pauses between asks for an ended job's manifest that went unanswered (each ask waits up to 10 s). */
const MANIFEST_PAUSES_MS = [500, 2_000];
/**
 * A start left unanswered is asked once more, at once: each ask waits CALL_TTL_MS, in all as long
 * as a running job's provider may stay silent before the run is lost (LOST_AFTER_MS). One that
 * could not be delivered is asked again over the further pauses (7 s in all): a node started
 * again asks its previous process's unanswered starts before it has reached its peers, and a
 * start given up there placed the job anew where the provider still ran it.
 */
const START_AGAIN_MS = [0, 1_000, 2_000, 4_000];
/** How long a provider may report a cancelled job running (config `placement.cancel_bound_ms`). */
export const CANCEL_BOUND_MS = 30_000;

export interface RemoteFollowerOptions {
  actor: Actor;
  logsDir: string;
  maxLogBytes?: number;
  lostAfterMs?: number;
  /** Which providers may be sent a job's secrets; default none (the placement sends such jobs only to trusted ones). */
  trusts?: ProviderTrust;
  cancelBoundMs?: number;
  /** How long the provider holds each poll open (`deployment.follow_poll_ms`). */
  pollWaitMs?: number;
  /** Makes each run's machine: the executor actor's `ctx.machine`, so the node sees its steps. Default: plain xstate. */
  machine?: MachineFactory;
  /** Where the provider's signed manifest of a job with outputs is written when it ends (actors/outputs). */
  manifests?: ManifestFiles;
  /** Where cancels the providers missed are kept across restarts (storage/cancels.ts); without, in memory only. */
  cancels?: CancelStore;
}

interface RemoteRun {
  node: string;
  machine: RunMachine;
  /** When this node asked the provider to stop it (ms since the epoch). */
  cancelledAt?: number;
  /** The follower has been set going. */
  followed?: boolean;
  /** Whether the job asked for outputs; unknown after a restart (then the provider is asked). */
  outputs?: boolean;
}

export class RemoteFollower extends StoredOutput implements ExecutorImplementation {
  readonly name = REMOTE_EXECUTOR;
  /** The provider collects and signs a placed job's outputs; this follower fetches its signed manifest when the job ends (fetchManifest). */
  readonly collectsOutputs = true;
  private readonly runs = new Map<string, RemoteRun>();
  private readonly stopping = new AbortController();
  private readonly lostAfterMs: number;
  private readonly cancelBoundMs: number;
  private readonly trusts: ProviderTrust;
  private readonly machines: MachineFactory;
  private readonly missed: CancelOutbox;

  constructor(private readonly opts: RemoteFollowerOptions) {
    super(opts.logsDir, opts.maxLogBytes);
    this.missed = new CancelOutbox(
      async (node, id, reason, given_up_ms) => {
        const cancel = (payload: object) => opts.actor.call(provider(node), DeploymentBehaviors.cancel, { id, reason, ...payload }, JobSchema, { ttlMs: CALL_TTL_MS });
        // A provider of an earlier release reads no age and refuses the whole request: asked without.
        await cancel({ given_up_ms }).catch((e: unknown) => (e instanceof DmsError && e.kind === 'invalid' ? cancel({}) : Promise.reject(e)));
      },
      opts.actor.system.log,
      opts.cancels,
    );
    this.machines = opts.machine ?? plainMachines;
    this.lostAfterMs = opts.lostAfterMs ?? LOST_AFTER_MS;
    this.cancelBoundMs = opts.cancelBoundMs ?? CANCEL_BOUND_MS;
    this.trusts = opts.trusts ?? (() => false);
  }

  /**
   * The cancels an earlier process of this node left waiting are asked again. Not waited for by
   * the node's start (a query, about 10 ms of a warm start): a start of a run forgets its job's
   * cancel only once they are read (CancelOutbox.forget).
   */
  open(): void {
    void this.missed.open();
  }

  close(): void {
    this.stopping.abort();
    this.missed.close();
  }

  /**
   * Phase two of the placement: the provider starts what it holds for the job. A job its
   * placement started already (its reserve carried the start, ReserveRequest.start) comes with
   * `container_id` naming the provider, the run's id: it is followed, not started again.
   */
  async start(job: Job): Promise<ExecutionHandle> {
    const node = job.node;
    if (!node || this.opts.actor.system.isHere(node)) throw invalid(`job ${job.id} is not placed on another node`);
    // The placement asked trusted providers only; this is the last door before the values leave.
    if (Object.keys(job.secrets).length > 0 && !this.trusts(node)) throw new DmsError('forbidden', `job ${job.id} has secrets and node ${node} ${untrustedReason}`);
    // Started there again (a pinned job placed anew): this run is not the one given up.
    await this.missed.forget(job.id);
    // What the job's run before this one sent (placed again, here or elsewhere) is not this
    // run's output: it is kept as the previous run's (a lost run's output says why it was lost).
    await this.logStore.retire(job.id);
    const machine = newRun(this.machines, job.id, 'creating');
    // Started by its placement, with the reserve (one round trip): the run there is only followed.
    if (job.container_id === node) return this.created(job, node, machine);
    const spec = deployedJobOf(job);
    try {
      await this.startThere(node, spec);
    } catch (e) {
      // Its share there is let go at once rather than when the lease runs out.
      void this.opts.actor.tell(provider(node), DeploymentBehaviors.release, { job_id: job.id }).catch(() => undefined);
      machine.send({ type: 'failed', error: errorText(e) });
      throw e;
    }
    return this.created(job, node, machine);
  }

  private created(job: Job, node: string, machine: RunMachine): ExecutionHandle {
    machine.send({ type: 'created', id: node });
    this.runs.set(job.id, { node, machine, outputs: job.outputs.length > 0 });
    return { executor: this.name, job_id: job.id, id: node };
  }

  /**
   * Asks the provider to start the job, and asks again while no answer comes: an answer lost or
   * late may be of a start that happened, and the provider answers a repeated start with the
   * job it runs. Given up after START_ASKS, the caller releases it there, which stops a job
   * started meanwhile, before the job is placed elsewhere.
   */
  private async startThere(node: string, spec: DeployedJob): Promise<void> {
    let unanswered = 0;
    await withRetries(() => this.opts.actor.call(provider(node), DeploymentBehaviors.start, { job: spec }, StartReply, { ttlMs: CALL_TTL_MS }), {
      pauses: START_AGAIN_MS,
      // Only no answer (or the provider's "still starting it"), once, or no delivery is asked again: a refusal is an answer.
      retryable: (e) => e instanceof DmsError && ((e.kind === 'timeout' && ++unanswered <= 1) || e.kind === 'unroutable'),
      signal: this.stopping.signal,
      onRetry: (e, ask) => this.opts.actor.system.log.info({ job: spec.id, node, ask, err: errorText(e) }, 'start not answered: asking again'),
    });
  }

  /**
   * Fetches the ended job's signed manifest, asking again while no answer comes or the provider
   * cannot be reached (MANIFEST_PAUSES_MS): the job's record is final once its end is told, so a
   * manifest missed now is its outputs lost to this node. A refused one (not the job's, not its
   * outputs) is not asked for again.
   */
  private async manifestOf(jobId: string, node: string): Promise<void> {
    const transient = (e: unknown) => e instanceof DmsError && (e.kind === 'timeout' || e.kind === 'unavailable' || e.kind === 'unroutable' || e.kind === 'overloaded');
    try {
      await withRetries(() => fetchManifest(this.opts.actor, node, jobId, this.opts.manifests!), {
        pauses: MANIFEST_PAUSES_MS,
        retryable: transient,
        signal: this.stopping.signal,
        onRetry: (e) => this.opts.actor.system.log.info({ job: jobId, node, err: errorText(e) }, 'result manifest not received: asking again'),
      });
    } catch (e) {
      this.opts.actor.system.log.warn({ job: jobId, node, err: errorText(e) }, transient(e) ? 'result manifest not received' : 'result manifest refused');
    }
  }

  wait(handle: ExecutionHandle): Promise<ExitResult> {
    const run = this.runOf(handle);
    if (!run.followed) {
      run.followed = true;
      // However the follower ends, the stop (if one was asked) is over with it.
      const { machine } = run;
      this.follow(handle.job_id, run)
        .then(
          (result) => machine.send({ type: 'exited', result }),
          (e: unknown) => machine.send({ type: 'lost', reason: errorText(e) }),
        )
        .finally(() => {
          // Only a run being stopped is still going once its follower ends.
          if (machine.getSnapshot().status === 'active') machine.send({ type: 'stopped' });
        });
    }
    return endOf(run.machine);
  }

  /** The run of `handle`; one picked up after a restart of this node is attached afresh (the handle names the provider). */
  private runOf(handle: ExecutionHandle): RemoteRun {
    let run = this.runs.get(handle.job_id);
    if (!run) {
      const machine = newRun(this.machines, handle.job_id, 'attaching', handle.id);
      machine.send({ type: 'attached' });
      this.runs.set(handle.job_id, (run = { node: handle.id, machine }));
    }
    return run;
  }

  /**
   * Asks the provider to stop it; the follower then sees it end, or gives up on it
   * `cancelBoundMs` from now. Whatever the provider answers, only that end counts: a stop that
   * does not come within the bound is the provider's to explain, not a wait without end here.
   */
  async cancel(handle: ExecutionHandle, reason: string): Promise<void> {
    const run = this.runOf(handle);
    run.cancelledAt ??= Date.now();
    run.machine.send({ type: 'cancel', reason });
    try {
      await this.opts.actor.call(provider(run.node), DeploymentBehaviors.cancel, { id: handle.job_id, reason }, JobSchema, { ttlMs: this.cancelBoundMs });
    } catch (e) {
      // Ended there already (conflict): nothing left to stop. Anything else the follower judges,
      // and the provider is told again until it answers.
      if (!(e instanceof DmsError && e.kind === 'conflict')) {
        this.opts.actor.system.log.debug({ job: handle.job_id, node: run.node, err: errorText(e) }, 'cancel not confirmed');
        await this.missed.add(handle.job_id, run.node, reason);
      }
    }
  }

  /** The provider cleans up its own run; here only the follower's record goes. */
  async cleanup(handle: ExecutionHandle): Promise<void> {
    this.runs.delete(handle.job_id);
  }

  /** Remote runs are picked up by the orchestrator from the jobs' records (their node), not found here. */
  async reconcile(): Promise<ReconcileReport> {
    return { reattached: [], missing: [], orphans: [] };
  }

  /** The provider still runs a job it was told to stop: it is not placed on for a while, and the run is given up. */
  private ignoredCancel(jobId: string, run: RemoteRun, sinceCancel: number): DmsError {
    const reason = `node ${run.node} ignored the cancel: it still reported job ${jobId} running ${Math.round(sinceCancel / 100) / 10} s after it`;
    void this.opts.actor.tell(this.opts.actor.local(DEPLOYMENT_INBOX), DeploymentBehaviors.exclude, { node: run.node, reason }).catch(() => undefined);
    return new DmsError('unavailable', reason);
  }

  /**
   * Polls the provider until the job ends there, copying its output here. The copy starts
   * afresh (a follower picked up after a restart reads the output again from the start, and
   * its first chunk replaces what an earlier process copied).
   */
  private async follow(jobId: string, run: RemoteRun): Promise<ExitResult> {
    // Made at the first chunk: a silent job leaves no file, which spares an open and a close per job.
    let writer: LogWriter | undefined;
    const to = provider(run.node);
    let from = 0;
    let answeredAt = Date.now();
    try {
      for (;;) {
        if (this.stopping.signal.aborted) throw new DmsError('unavailable', 'the node is stopping');
        const sinceCancel = run.cancelledAt === undefined ? 0 : Date.now() - run.cancelledAt;
        if (sinceCancel >= this.cancelBoundMs) throw this.ignoredCancel(jobId, run, sinceCancel);
        // Once cancelled, no poll outlasts the bound.
        const pollMs = this.opts.pollWaitMs ?? POLL_WAIT_MS;
        const waitMs = run.cancelledAt === undefined ? pollMs : Math.max(0, Math.min(pollMs, this.cancelBoundMs - sinceCancel));
        let page: LogsReply;
        const asked = Date.now();
        try {
          page = await this.opts.actor.call(to, DeploymentBehaviors.logs, { id: jobId, from, limit: PAGE_BYTES, wait_ms: waitMs }, LogsReply, {
            ttlMs: waitMs + CALL_TTL_MS,
          });
        } catch (e) {
          if (e instanceof DmsError && e.kind === 'not_found') throw new DmsError('unavailable', `node ${run.node} no longer knows the job`);
          const silent = Date.now() - answeredAt;
          if (silent >= this.lostAfterMs) {
            const lost = `node ${run.node} unreachable for ${Math.round(silent / 1000)} s: ${errorText(e)}`;
            // Given up here: a provider that comes back must not run it on.
            await this.missed.add(jobId, run.node, `its requester gave it up: ${lost}`);
            throw new DmsError('unavailable', lost);
          }
          await sleep(RETRY_MS, undefined, { signal: this.stopping.signal }).catch(() => undefined);
          continue;
        }
        answeredAt = Date.now();
        if (page.chunks.length > 0) writer ??= await this.logStore.create(jobId);
        for (const c of page.chunks) writer!.append(c.stream, c.data, new Date(c.at));
        from = page.next;
        if (page.done) {
          const failed = page.status === 'failed';
          const result: ExitResult = {
            exit_code: page.exit_code ?? (failed ? -1 : 0),
            oom_killed: page.error === 'killed: out of memory',
            ...(failed ? { error: page.error ?? `failed on node ${run.node}` } : {}),
          };
          // Before the end is told: the orchestrator stores the manifest with it (actors/outputs).
          if (this.opts.manifests && run.outputs !== false) await this.manifestOf(jobId, run.node);
          return result;
        }
        // A provider holds a poll open until there is news or its wait is up (actors/orchestrator/logs.ts).
        // One that answered at once with nothing, or with output past this node's cap, had this
        // node poll it hundreds of times a second for as long as the job ran: such polls are paced.
        const early = page.chunks.length === 0 && !page.more && Date.now() - asked < waitMs / 2;
        if (early || writer?.full) await sleep(early ? RETRY_MS : CUT_PACE_MS, undefined, { signal: this.stopping.signal }).catch(() => undefined);
      }
    } finally {
      await writer?.close();
    }
  }
}

const provider = (node: string): Handle => at(DEPLOYMENT_INBOX, node);
