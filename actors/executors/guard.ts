/**
 * The last line between an executor's fault and the node's process. Executors talk to engines
 * through libraries that report some failures as 'error' events on streams and requests they
 * create internally (docker-modem following a redirect, a socket reset mid-stream); one such
 * event nobody listens to is an uncaught exception, which would take every job of the node down
 * and, for a job still pending, do it again at every restart.
 *
 * Every executor call for a job runs inside `withinJob`, and everything those calls start
 * (requests, streams, timers) carries that job in its async context. An uncaught exception or
 * unhandled rejection that arises there fails that job with the error, and the node goes on.
 * One that arises outside any job is a fault of the node itself and still ends the process.
 */
import { AsyncLocalStorage } from 'node:async_hooks';
import { errorText } from '../../runtime/errors.js';
import type { Logger } from '../../runtime/log.js';

interface JobScope {
  jobId: string;
  /** Ends the job as failed with `reason`; called at most once per fault. */
  fail(reason: string): void;
}

const scope = new AsyncLocalStorage<JobScope>();

/** Runs `fn` (and everything it sets going) on behalf of job `jobId`. */
export function withinJob<T>(jobId: string, fail: (reason: string) => void, fn: () => T): T {
  return scope.run({ jobId, fail }, fn);
}

/** The job the current async context works for, if any. */
export const currentJob = (): string | undefined => scope.getStore()?.jobId;

let installed: ((e: unknown) => void) | null = null;

/**
 * Installs the process-wide handlers (once; later calls replace the logger). Returns a function
 * that removes them, for tests and an orderly stop.
 */
export function installExecutorGuard(log: Logger): () => void {
  if (installed) uninstall();
  const handler = (e: unknown) => {
    const job = scope.getStore();
    if (!job) {
      // Not an executor's: keep Node's own behaviour for a fault of the node.
      log.fatal({ err: errorText(e) }, 'uncaught exception');
      process.stderr.write(`${e instanceof Error ? (e.stack ?? e.message) : String(e)}\n`);
      process.exit(1);
    }
    log.error({ job: job.jobId, err: errorText(e) }, 'executor fault: failing the job, not the node');
    job.fail(`executor fault: ${errorText(e)}`);
  };
  installed = handler;
  process.on('uncaughtException', handler);
  process.on('unhandledRejection', handler);
  return uninstall;
}

function uninstall(): void {
  if (!installed) return;
  process.off('uncaughtException', installed);
  process.off('unhandledRejection', installed);
  installed = null;
}
