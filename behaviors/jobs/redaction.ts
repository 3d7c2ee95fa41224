/**
 * Job environments (and `secrets`, always) carry secrets (tokens, passwords handed to the workload). Whoever may only
 * look at jobs (the REST `viewer` role, other nodes and their users) sees that a variable is
 * set, never its value; the node itself, its operator's root identities and REST roles that
 * may run jobs see the values.
 */
import type { Job } from './schema.js';

export const REDACTED = '[redacted]';

export const redactValues = (values: Record<string, string>): Record<string, string> => Object.fromEntries(Object.keys(values).map((name) => [name, REDACTED]));

/** The job with every environment and secret value replaced by REDACTED; names are kept. */
export function redactJob(job: Job): Job {
  return { ...job, environment: redactValues(job.environment), secrets: redactValues(job.secrets) };
}
