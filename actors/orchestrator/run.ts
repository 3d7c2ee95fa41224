/**
 * One job the orchestrator is responsible for, from submission until its final state is
 * committed: the job machine's actor, the job record as last committed, and what waits on it
 * (a cancel waiting for the end, log readers waiting for news).
 */
import type { Actor } from 'xstate';
import type { Attempt, Job, JobStatus } from '../../behaviors/jobs/schema.js';
import type { ExecutionHandle } from '../../behaviors/jobs/execution.js';
import { type JobMachineEvent, type jobMachine, statusOf } from './machine.js';

export type JobMachine = typeof jobMachine;

export class JobRun {
  readonly id: string;
  /** When this process saw the run start (performance.now()), for the run duration metric. */
  runningSince: number | null = null;
  /** Its placements, kept here as they change (each write stores the whole list). */
  attempts: Attempt[];
  /** Run here for another node: its secrets, which its record holds redacted (see Orchestrator.accept). */
  secrets?: Record<string, string>;
  /** Resolves with the final job once its final state is committed. */
  readonly settled: Promise<Job>;
  private settle!: (job: Job) => void;
  private fail!: (e: unknown) => void;
  private readonly waiters = new Set<() => void>();
  private ended = false;

  constructor(
    /**
     * The job as last committed, with what the orchestrator knows of its placement ahead of the
     * commit (its node, its pending reason, a return to pending): what a follower of its output is shown.
     */
    public job: Job,
    /** The job's machine, made (not started) by the orchestrator so the node observes it. */
    readonly machine: Actor<JobMachine>,
  ) {
    this.id = job.id;
    this.attempts = [...job.attempts];
    this.settled = new Promise<Job>((resolve, reject) => {
      this.settle = resolve;
      this.fail = reject;
    });
    // A cancel is usually waiting; when none is, a failed final write must not go unhandled.
    this.settled.catch(() => undefined);
    this.machine.subscribe(() => this.wake());
  }

  start(): this {
    this.machine.start();
    return this;
  }

  /** Events that arrive after the machine stopped (a run ending during shutdown) are dropped. */
  send(event: JobMachineEvent): void {
    if (this.machine.getSnapshot().status === 'active') this.machine.send(event);
  }

  get status(): JobStatus {
    return statusOf(this.machine.getSnapshot());
  }

  /** A part of an ensemble waiting for its ensemble to place it (the machine's `pending.held`). */
  get held(): boolean {
    return this.machine.getSnapshot().hasTag('held');
  }

  /** Waiting for a node (the machine's `pending.unplaced`): freed resources or a new peer wake it. */
  get unplaced(): boolean {
    return this.machine.getSnapshot().hasTag('unplaced');
  }

  /** Waiting in this node's queue or for a node: a new peer may take it. */
  get waiting(): boolean {
    const snapshot = this.machine.getSnapshot();
    return snapshot.hasTag('unplaced') || snapshot.matches({ pending: 'queued' });
  }

  /** The machine reached completed or failed (its final write may still be in flight). */
  get finished(): boolean {
    return this.machine.getSnapshot().status === 'done';
  }

  get handle(): ExecutionHandle | null {
    return this.machine.getSnapshot().context.handle;
  }

  /** The committed final state, once there is one. */
  final: Job | null = null;

  /** The final state is committed: wakes everyone still waiting. */
  end(result: { job: Job } | { error: unknown }): void {
    this.ended = true;
    if ('job' in result) {
      this.job = result.job;
      this.final = result.job;
      this.settle(result.job);
    } else {
      this.fail(result.error);
    }
    this.wake();
  }

  /** Resolves at the run's next transition, when it ends, or when `signal` aborts. */
  nextChange(signal: AbortSignal): Promise<void> {
    if (this.ended || signal.aborted) return Promise.resolve();
    return new Promise<void>((resolve) => {
      const done = () => {
        this.waiters.delete(done);
        signal.removeEventListener('abort', done);
        resolve();
      };
      this.waiters.add(done);
      signal.addEventListener('abort', done, { once: true });
    });
  }

  /** Stops the machine, its timer and its invoked effects: no transition, and so no effect, happens after this. */
  halt(): void {
    this.machine.stop();
    this.wake();
  }

  private wake(): void {
    for (const w of [...this.waiters]) w();
  }
}

/** Ends the open attempt (on `node`, when given) with how it ended; false when none was open. */
export function closeAttempt(attempts: Attempt[], outcome: NonNullable<Attempt['outcome']>, reason: string | null, node?: string): boolean {
  const open = attempts.at(-1);
  if (!open || open.ended_at !== null || (node !== undefined && open.node !== node)) return false;
  Object.assign(open, { ended_at: new Date().toISOString(), outcome, reason });
  return true;
}
