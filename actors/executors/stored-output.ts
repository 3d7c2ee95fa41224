/**
 * The output side of an executor that keeps its runs' output in a JobLogs store (Docker, null,
 * remote): the Executor interface's output methods, answered from the store by job id. Each
 * of those executors extends it and writes into `logStore` as its runs produce output.
 */
import { JobLogs } from './logfile.js';
import type { ExecutionHandle, Executor, LogPage } from '../../behaviors/jobs/execution.js';

export abstract class StoredOutput implements Pick<Executor, 'readLogs' | 'readPreviousLogs' | 'waitForLogs'> {
  protected readonly logStore: JobLogs;

  constructor(logsDir: string, maxLogBytes?: number) {
    this.logStore = new JobLogs(logsDir, maxLogBytes);
  }

  readLogs(handle: ExecutionHandle, from: number, limit: number, log?: string): Promise<LogPage> {
    return this.logStore.readPage(handle.job_id, from, limit, log);
  }

  readPreviousLogs(handle: ExecutionHandle, from: number, limit: number): Promise<LogPage | null> {
    return this.logStore.readPreviousPage(handle.job_id, from, limit);
  }

  waitForLogs(handle: ExecutionHandle, from: number, signal: AbortSignal): Promise<boolean> {
    return this.logStore.waitBeyond(handle.job_id, from, signal);
  }
}
