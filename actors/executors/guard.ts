/**
 * The last line between an executor's fault and the node's process. Executors talk to engines
 * through libraries that report some failures as 'error' events on streams and requests they
 * create internally (docker-modem following a redirect, a socket reset mid-stream); one such
 * event nobody listens to is an uncaught exception, which would take every job of the node down
 * and, for a job still pending, do it again at every restart.
 *
 * Each executor actor owns one guard, installed when the actor starts and removed when it stops.
 * Every call it makes for a job runs inside `within`, and everything those calls start
 * (requests, streams, timers) carries that job in the guard's async context. An uncaught
 * exception or unhandled rejection that arises there fails that job with the error, and the
 * node goes on. One that arises outside every guard's jobs is a fault of the node itself and
 * still ends the process.
 *
 * Nothing is kept at module level: two nodes (or two executors) in one process each have their
 * own guards. The process's listener list is what they share, as the process is: the guards
 * find each other there, so exactly one of them ends the process for a fault none of them owns.
 */
import { AsyncLocalStorage } from 'node:async_hooks';
import { errorText } from '../../runtime/errors.js';
import type { Logger } from '../../runtime/log.js';

interface JobScope {
  jobId: string;
  /** Ends the job as failed with `reason`; called at most once per fault. */
  fail(reason: string): void;
}

/** Marks a process listener as a guard's, so guards can tell whether another one owns a fault. */
const GUARD = Symbol.for('dms.executorGuard');
type GuardListener = ((e: unknown) => void) & { [GUARD]: ExecutorGuard };

const guardsListening = (): ExecutorGuard[] =>
  process.listeners('uncaughtException').flatMap((l) => ((l as Partial<GuardListener>)[GUARD] ? [(l as GuardListener)[GUARD]] : []));

export class ExecutorGuard {
  private readonly scope = new AsyncLocalStorage<JobScope>();
  private listener: GuardListener | null = null;

  constructor(private readonly log: Logger) {}

  /** Runs `fn` (and everything it sets going) on behalf of job `jobId`. */
  within<T>(jobId: string, fail: (reason: string) => void, fn: () => T): T {
    return this.scope.run({ jobId, fail }, fn);
  }

  /** The job the current async context works for under this guard, if any. */
  currentJob(): string | undefined {
    return this.scope.getStore()?.jobId;
  }

  /** Adds the process-wide handlers (once). Returns a function that removes them. */
  install(): () => void {
    if (!this.listener) {
      const listener = Object.assign((e: unknown) => this.onFault(e), { [GUARD]: this });
      this.listener = listener;
      process.on('uncaughtException', listener);
      process.on('unhandledRejection', listener);
    }
    return () => this.uninstall();
  }

  uninstall(): void {
    if (!this.listener) return;
    process.off('uncaughtException', this.listener);
    process.off('unhandledRejection', this.listener);
    this.listener = null;
  }

  private onFault(e: unknown): void {
    const job = this.scope.getStore();
    if (job) {
      this.log.error({ job: job.jobId, err: errorText(e) }, 'executor fault: failing the job, not the node');
      job.fail(`executor fault: ${errorText(e)}`);
      return;
    }
    // Another guard's job, or nobody's: only the first guard listening speaks for the node.
    const guards = guardsListening();
    if (guards.some((g) => g.currentJob() !== undefined) || guards[0] !== this) return;
    // Not an executor's: keep Node's own behaviour for a fault of the node.
    this.log.fatal({ err: errorText(e) }, 'uncaught exception');
    process.stderr.write(`${e instanceof Error ? (e.stack ?? e.message) : String(e)}\n`);
    process.exit(1);
  }
}
