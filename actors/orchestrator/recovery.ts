/**
 * Start-up recovery, the decision part: given the jobs a previous process of this node left
 * unfinished and what each executor found of their runs, what becomes of each job. Kept free
 * of I/O so every case can be checked directly.
 */
import type { Job } from '../../behaviors/jobs/schema.js';
import type { ExecutionHandle, ReconcileReport } from '../../behaviors/jobs/execution.js';

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
