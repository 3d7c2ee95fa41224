/**
 * What happens after a job is submitted from the command line: say so and return, print only
 * its id, wait for its end, or follow its output. Shared by `jobs submit` and `run`.
 */
import type { Command } from 'commander';
import type { Job, JobSpecInput } from '../behaviors/jobs/schema.js';
import { globals, output } from './context.js';
import { followJob } from './follow.js';
import { restFor } from './rest.js';

export interface AfterSubmit {
  /** Print only the job's id on stdout (then wait or follow if asked). */
  idOnly?: boolean;
  /** Wait for the end without printing the job's output; exit with its exit code. */
  wait?: boolean;
  /** Print the job's output and progress until it ends; exit with its exit code. */
  follow?: boolean;
}

export async function submitJob(cmd: Command, spec: JobSpecInput | unknown, after: AfterSubmit): Promise<void> {
  const rest = restFor(cmd);
  const json = globals(cmd).json ?? false;
  const job = await rest.post<Job>('/api/v1/jobs', spec);
  if (after.idOnly) process.stdout.write(`${job.id}\n`);
  if (!after.wait && !after.follow) {
    if (!after.idOnly) output(cmd, job, `submitted job ${job.id} (${job.name}): ${job.status}`);
    return;
  }
  // Progress goes to stderr so that stdout stays the job's own output (or just the id).
  if (!after.idOnly) process.stderr.write(`[dms] submitted job ${job.id} (${job.name})\n`);
  const follow = Boolean(after.follow);
  process.exitCode = await followJob(rest, job.id, { output: follow, progress: follow, json, placement: true });
}
