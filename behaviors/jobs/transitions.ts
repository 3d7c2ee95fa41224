/**
 * Which stored status a job may move to from which: the one statement of the job model that
 * both the orchestrator's job machine (actors/orchestrator/machine.ts, whose states map onto
 * these statuses and which a test walks against this table) and storage (storage/job-rules.ts,
 * which refuses any other write) follow.
 */
import { isTerminal, type JobStatus } from './schema.js';

// pending → running → completed | failed; a pending job can also fail (cancelled, never
// scheduled), and a running one goes back to pending when the node running it for this one
// is lost and the job may be placed again. Terminal jobs never change, so a late executor
// report cannot resurrect one. Staying put is a change too: a new pending reason, a
// reattached container.
export const JOB_TRANSITIONS: Readonly<Record<JobStatus, readonly JobStatus[]>> = {
  pending: ['pending', 'running', 'failed'],
  running: ['running', 'pending', 'completed', 'failed'],
  completed: [],
  failed: [],
};

export const canBecome = (from: JobStatus, to: JobStatus): boolean => JOB_TRANSITIONS[from].includes(to);

/** Why a job that is `from` cannot become `to` (`has already failed`), or null when it can. */
export function refusedTransition(from: JobStatus, to: JobStatus): string | null {
  if (canBecome(from, to)) return null;
  return isTerminal(from) ? `has already ${from}` : `is ${from} and cannot become ${to}`;
}
