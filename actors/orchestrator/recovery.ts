/**
 * Start-up recovery: given the jobs a previous process of this node left unfinished and what
 * each executor found of their runs, what becomes of each job (planRecovery, kept free of I/O
 * so every case can be checked directly), and carrying the plan out (recoverJobs).
 */
import { isTerminal, type Job, type ResourceSpec } from '../../behaviors/jobs/schema.js';
import type { ExecutionHandle, ReconcileReport } from '../../behaviors/jobs/execution.js';
import { errorText } from '../../runtime/errors.js';
import type { Logger } from '../../runtime/log.js';
import type { Storage } from '../../storage/index.js';
import type { ExecutorClients } from '../executors/clients.js';
import { REMOTE_EXECUTOR } from '../executors/remote.js';
import type { ExecutorClient } from './executors.js';
import type { JobJournal } from './journal.js';
import type { JobRun } from './run.js';

/** What one executor said about its jobs; `error` when it could not be asked (e.g. no Docker engine). */
export type ExecutorFindings = { report: ReconcileReport } | { error: string } | { absent: true };

export interface RecoveryPlan {
  /** Runs found again: the job is (or becomes) running and is followed to its end. */
  reattach: { job: Job; handle: ExecutionHandle }[];
  /** Jobs that were running and whose run is gone: they fail with the reason. */
  lose: { job: Job; reason: string }[];
  /** Jobs that never started: they wait for resources again, oldest first. */
  queue: Job[];
  /** Running jobs nobody can tell about now: left as they are for a later start-up to settle. */
  untracked: Job[];
}

/**
 * `open` in submission order; `findings` by executor name. `unstartable` says why a job that
 * never started must not be tried again (e.g. an image this release refuses): queueing it
 * would only retry, at every restart, a start that cannot be allowed.
 */
export function planRecovery(
  open: readonly Job[],
  findings: ReadonlyMap<string, ExecutorFindings>,
  unstartable: (job: Job) => string | null = () => null,
): RecoveryPlan {
  const plan: RecoveryPlan = { reattach: [], lose: [], queue: [], untracked: [] };
  const found = new Map<string, ExecutionHandle>();
  const gone = new Map<string, string>();
  for (const f of findings.values()) {
    if (!('report' in f)) continue;
    for (const r of f.report.reattached) found.set(r.handle.job_id, r.handle);
    for (const m of f.report.missing) gone.set(m.job_id, m.reason);
  }
  for (const job of open) {
    const f = findings.get(job.executor) ?? { absent: true };
    if ('absent' in f) {
      // Nothing on this node can run or follow it any more.
      plan.lose.push({ job, reason: `executor "${job.executor}" is not available on this node` });
      continue;
    }
    const handle = found.get(job.id);
    // A pending job whose run exists was started just before the node stopped, before it was
    // recorded as running: it is followed like any other.
    if (handle) plan.reattach.push({ job, handle });
    else if (job.status === 'pending') {
      const why = unstartable(job);
      if (why) plan.lose.push({ job, reason: `not started: ${why}` });
      else plan.queue.push(job);
    }
    else if ('error' in f) plan.untracked.push(job);
    else plan.lose.push({ job, reason: gone.get(job.id) ?? 'its run was not found after the node restarted' });
  }
  return plan;
}

/** What recovery needs of the orchestrator. */
export interface RecoveryHost {
  storage: Storage;
  executors: ExecutorClients<ExecutorClient>;
  log: Logger;
  /** Placed on another node, and followed there. */
  remotely(job: Job): boolean;
  unstartable(job: Job): string | null;
  /** Holds the shares of runs found running, whatever the manager would say now. */
  hold(jobs: { job_id: string; resources: ResourceSpec }[]): Promise<void>;
  /** Follows the job; `recovering`: it waits for what recovery found of its run instead of being placed. */
  track(job: Job, recovering?: boolean): JobRun;
  journal: JobJournal;
}

/** Asks every executor what it still has of the unfinished jobs, and follows, fails or queues each. */
export async function recoverJobs(o: RecoveryHost): Promise<void> {
  const stored = await o.storage.jobs.list({ status: ['pending', 'running'] });
  // Jobs placed on other nodes are followed there again; the executors here know nothing of them.
  const open = stored.filter((job) => !o.remotely(job));
  const remote = stored.filter((job) => o.remotely(job));
  const findings = new Map<string, ExecutorFindings>();
  for (const name of new Set(open.map((j) => j.executor))) if (!o.executors.has(name)) findings.set(name, { absent: true });
  for (const executor of o.executors.all()) {
    const ids = open.filter((j) => j.executor === executor.name).map((j) => j.id);
    try {
      const report = await executor.reconcile(ids);
      findings.set(executor.name, { report });
      await removeOrphans(o, executor, report.orphans);
    } catch (e) {
      findings.set(executor.name, { error: errorText(e) });
      if (ids.length > 0) o.log.warn({ executor: executor.name, jobs: ids.length, err: errorText(e) }, 'cannot recover runs: executor unavailable');
    }
  }
  const plan = planRecovery(open, findings, (job) => o.unstartable(job));
  for (const job of plan.untracked) o.log.warn({ job: job.id }, 'running job left as it is: its executor cannot be asked now');

  // They run already, so they hold their share whatever the manager would say now.
  if (plan.reattach.length > 0) await o.hold(plan.reattach.map(({ job }) => ({ job_id: job.id, resources: job.resources })));
  for (const { job, handle } of plan.reattach) {
    // Its timeout counts from when it began running, not from now.
    const since = job.timeout_s ? await runningSince(o, job) : undefined;
    o.track(job, true).send({ type: 'reattached', handle, since });
  }
  for (const { job, reason } of plan.lose) o.track(job, true).send({ type: 'fault', reason });
  for (const job of remote) {
    if (job.status === 'running') {
      const since = job.timeout_s ? await runningSince(o, job) : undefined;
      o.track(job, true).send({ type: 'reattached', handle: { executor: REMOTE_EXECUTOR, job_id: job.id, id: job.node! }, since, node: job.node! });
    } else {
      // Placed there and asked to start, the answer lost with the process: the provider may run
      // it, and would refuse it placed anew ("already runs here") while the run went on unheld.
      // The start is asked again: answered with the run it began, or refused (nothing began, the
      // lease ran out) and then the job is placed anew as after any refused start.
      o.track(job, true).send({ type: 'ask_again', node: job.node! });
    }
  }
  for (const job of plan.queue) o.track(job);
  if (stored.length > 0) {
    o.log.info({ reattached: plan.reattach.length, failed: plan.lose.length, pending: plan.queue.length, remote: remote.length }, 'jobs recovered');
  }
}

/** When the job last started running (now if it never did): its timeout counts from there. */
async function runningSince(o: RecoveryHost, job: Job): Promise<number> {
  const events = await o.storage.events.listFor(job.id);
  const started = events.findLast((e) => e.to_status === 'running' && e.from_status === 'pending');
  return started ? Date.parse(started.at) : Date.now();
}

/** Runs left over from finished jobs (a crash between the end and the clean-up) are removed. */
async function removeOrphans(o: RecoveryHost, executor: ExecutorClient, orphans: ExecutionHandle[]): Promise<void> {
  for (const handle of orphans) {
    const job = await o.storage.jobs.get(handle.job_id);
    if (job && isTerminal(job.status)) await executor.cleanup(handle);
    else o.log.info({ executor: executor.name, run: handle.id, job: handle.job_id }, 'left alone a run of an unknown job');
  }
}
