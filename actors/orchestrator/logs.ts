/**
 * Where a job's output is read from: its executor and the handle of its run. Reads are by byte
 * offset (/dms/executor/logs/read), so a follower coming back for more reads only what is new.
 */
import type { ExecutionHandle } from '../../behaviors/jobs/execution.js';
import type { LogsReply } from '../../behaviors/jobs/jobs.js';
import { isTerminal, type Job } from '../../behaviors/jobs/schema.js';
import { notFound } from '../../runtime/errors.js';
import { settledWithin } from '../../runtime/deadline.js';
import type { Storage } from '../../storage/index.js';
import type { ExecutorClient } from './executors.js';
import type { JobRun } from './run.js';

export interface LogSource {
  executor: ExecutorClient;
  handle: ExecutionHandle;
}

/**
 * What a reader of a job's output needs of the job: its state, and where its output is. What
 * the job ran (its command and environment: up to a request body's size, 1 MiB) is not: 256
 * ended jobs kept whole held 300 MB of a node's heap.
 */
export type JobState = Pick<Job, 'id' | 'status' | 'exit_code' | 'error' | 'pending_reason' | 'executor' | 'node' | 'requester' | 'container_id'>;

/** The state of `job` alone. */
export function stateOf(job: Job): JobState {
  const { id, status, exit_code, error, pending_reason, executor, node, requester, container_id } = job;
  return { id, status, exit_code, error, pending_reason, executor, node, requester, container_id };
}

/** The job's state as it was read, with a page of its output. */
function answer(job: JobState, page: Pick<LogsReply, 'chunks' | 'next' | 'log'>, more: boolean, done: boolean): LogsReply {
  const { id, status, exit_code, error, pending_reason } = job;
  return { id, status, exit_code, error, pending_reason, chunks: page.chunks, next: page.next, more, done, log: page.log };
}

/** Resolves when `signal` aborts: the part of a wait that ends it at its deadline. */
export function aborted(signal: AbortSignal): Promise<void> {
  if (signal.aborted) return Promise.resolve();
  return new Promise((resolve) => signal.addEventListener('abort', () => resolve(), { once: true }));
}

/** Reads jobs' output in pages for /dms/job/logs, waiting for news when asked to. */
export class OutputReader {
  constructor(
    /** Jobs not yet finished, by id (the orchestrator's). */
    private readonly runs: ReadonlyMap<string, JobRun>,
    /** The final states of jobs that ended lately, by id. */
    private readonly ended: ReadonlyMap<string, JobState>,
    private readonly storage: Storage,
    /** Where a job's output is read from now; null when nothing can read it. */
    private readonly source: (job: JobState, run: JobRun | undefined) => LogSource | null,
  ) {}

  /**
   * A page of output from byte `from` ('end': the current end). With `wait_ms`, an answer that
   * would be empty waits for output, a state change or the end of the job, whichever comes first.
   */
  async read(p: { id: string; from: number | 'end'; limit: number; wait_ms: number; previous?: boolean; log?: string }): Promise<LogsReply> {
    if (p.previous) return this.readPrevious(p);
    const deadline = Date.now() + p.wait_ms;
    // Past the end reads as the end, which is what 'end' asks for.
    let from = p.from === 'end' ? Number.MAX_SAFE_INTEGER : p.from;
    let log = p.log;
    let followed: JobRun | undefined;
    for (;;) {
      const run = this.runs.get(p.id);
      // Ended, its end being committed: its output is all stored (an executor reports an end only
      // after), so a reader that may wait has it with the end in one answer once the commit is
      // in, rather than now and the end on its next poll.
      if (run?.finished && !run.final && deadline > Date.now()) {
        // Committed, or not (its error is the end's to report), or the wait is over: read on either way.
        await settledWithin(run.settled.catch(() => undefined), deadline - Date.now(), () => undefined);
        followed = run;
        continue;
      }
      // A run holds its job as last committed, and one that ended while we waited hands over its
      // final state: the database is read only for a job this node no longer follows. Read
      // there, a poll queued behind the very commit of the job's end (one connection).
      const job = run?.job ?? followed?.final ?? this.ended.get(p.id) ?? (await this.storage.jobs.get(p.id));
      followed = run;
      if (!job) throw notFound(`job ${p.id} not found`);
      // Decided before reading: a job already finished has every chunk of its output stored.
      const ended = run === undefined && isTerminal(job.status);
      // Not started yet: it has no output, whatever a run of the job before left (placed again).
      // A reader that names the log it was reading keeps its place in it: once the new run runs,
      // the rest of that log comes first (JobLogs.readPage).
      const source = run && !run.finished && run.handle === null ? null : this.source(job, run);
      const page = source
        ? await source.executor.readLogs(source.handle, from, p.limit, log === undefined ? {} : { log })
        : { chunks: [], next: log === undefined ? 0 : from, size: 0, log: log ?? null, ahead: false };
      from = page.next;
      log = page.log ?? undefined;
      const more = page.ahead || page.next < page.size;
      const done = ended && !more;
      const left = deadline - Date.now();
      if (page.chunks.length > 0 || more || done || left <= 0) return answer(job, page, more, done);
      await this.news(run, source, from, left);
    }
  }

  /** A page of the output of the job's run before its current one: it has ended, so this never waits. */
  private async readPrevious(p: { id: string; from: number | 'end'; limit: number }): Promise<LogsReply> {
    const run = this.runs.get(p.id);
    const job = run?.job ?? this.ended.get(p.id) ?? (await this.storage.jobs.get(p.id));
    if (!job) throw notFound(`job ${p.id} not found`);
    const source = this.source(job, run);
    if (!source) throw notFound(`job ${p.id} has no earlier run's output on this node: its executor '${job.executor}' is not here`);
    const page = await source.executor.readLogs(source.handle, p.from === 'end' ? Number.MAX_SAFE_INTEGER : p.from, p.limit, { previous: true });
    const more = page.next < page.size;
    return answer(job, page, more, !more);
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
          waits.push(source.executor.waitForLogs(source.handle, from, ms).then((found) => (found ? undefined : quiet()), quiet));
        }
      }
      await Promise.race(waits);
    } finally {
      clearTimeout(timer);
      ac.abort();
    }
  }
}
