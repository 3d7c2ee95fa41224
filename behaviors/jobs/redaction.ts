/**
 * Job environments carry secrets (tokens, passwords handed to the workload). Whoever may only
 * look at jobs (the REST `viewer` role, other nodes and their users) sees that a variable is
 * set, never its value; the node itself, its operator's root identities and REST roles that
 * may run jobs see the values.
 */
import type { Job } from './schema.js';

export const REDACTED = '[redacted]';

/** The job with every environment value replaced by REDACTED; names are kept. */
export function redactJob(job: Job): Job {
  const environment = Object.fromEntries(Object.keys(job.environment).map((name) => [name, REDACTED]));
  return { ...job, environment };
}
