/**
 * What a job row is and how it may change, free of any way of storing it: the group commit's
 * SQL (./job-batch.ts), the one way jobs are written, applies these rules. Which
 * status may follow which is the job model's (behaviors/jobs/transitions.ts), shared with the
 * orchestrator's job machine.
 */
import { randomUUID } from 'node:crypto';
import type { InferEntity } from '@mikro-orm/core';
import { z } from 'zod';
import type { JobOutput } from '../behaviors/jobs/files.js';
import { type Attempt, isTerminal, JobSpecSchema, type Job, type JobSpecInput, type JobStatus } from '../behaviors/jobs/schema.js';
import { parseWith } from '../runtime/issues.js';
import { refusedTransition } from '../behaviors/jobs/transitions.js';
import { DmsError } from '../runtime/errors.js';
import type { JobEntity, JobEventEntity } from './entities.js';

export type JobRow = InferEntity<typeof JobEntity>;
export type JobEventRow = InferEntity<typeof JobEventEntity>;
/** An event before it is stored (the database numbers it). */
export type NewJobEvent = Omit<JobEventRow, 'id'>;

export interface JobCreateOptions {
  /** Keep the id a job already has (e.g. one submitted on another node); a new uuid otherwise. */
  id?: string;
  node?: string | null;
  pending_reason?: string | null;
  /** Peer id of the node it was submitted on (a job run here for another node). */
  requester?: string | null;
  /** The ensemble it is a part of, and which part (README "Ensembles"). */
  ensemble?: { id: string; part: string } | null;
  /**
   * Placed here again by its requester (a job pinned to this node, back after it lost the run):
   * an ended record of the same id and requester is replaced by the new run, its events kept.
   */
  again?: boolean;
}

/**
 * A change to a job, recorded as one event. Without `status` the job keeps its status and the
 * event notes why the other fields changed (e.g. a new pending reason, a reattached container).
 */
export interface JobChange {
  status?: JobStatus;
  /** Why: stored on the event, and as `error` when the job fails without an explicit one. */
  reason: string;
  node?: string | null;
  exit_code?: number | null;
  error?: string | null;
  pending_reason?: string | null;
  container_id?: string | null;
  /** Replaces the list of placements. */
  attempts?: Attempt[];
  /** The outputs as the signed manifest lists them, and the manifest itself (base64). */
  outputs?: JobOutput[];
  manifest?: string | null;
}

/** The row of a new pending job; throws invalid naming every bad field of the spec. */
export function newJobRow(spec: JobSpecInput, opts: JobCreateOptions, now: Date): JobRow {
  const valid = parseWith(JobSpecSchema, spec, 'job spec');
  return {
    id: opts.id === undefined ? randomUUID() : parseWith(z.uuid(), opts.id, 'job id'),
    name: valid.name,
    image: valid.image,
    command: valid.command,
    environment: valid.environment,
    secrets: valid.secrets,
    resources: valid.resources,
    executor: valid.executor,
    status: 'pending',
    node: opts.node ?? null,
    exit_code: null,
    error: null,
    pending_reason: opts.pending_reason ?? null,
    timeout_s: valid.timeout_s ?? null,
    container_id: null,
    placement: valid.placement ?? null,
    requester: opts.requester ?? null,
    attempts: [],
    outputs: valid.outputs,
    inputs: valid.inputs,
    manifest: null,
    ports: valid.ports,
    ensemble: opts.ensemble ? parseWith(z.uuid(), opts.ensemble.id, 'ensemble id') : null,
    part: opts.ensemble?.part ?? null,
    created_at: now,
    updated_at: now,
  };
}

/** The event that records a job's creation: a job never exists without it. */
export const creationEvent = (row: JobRow): NewJobEvent => ({
  job_id: row.id,
  at: row.created_at,
  from_status: null,
  to_status: 'pending',
  reason: 'submitted',
});

/** The event that records a job placed here again, in place of its ended run `earlier`. */
export const againEvent = (row: JobRow, earlier: JobRow): NewJobEvent => ({
  job_id: row.id,
  at: row.created_at,
  from_status: earlier.status,
  to_status: 'pending',
  reason: `placed here again by its requester (the run here before ${earlier.status})`,
});

/**
 * Why a new job may not take the id `earlier` has (JobCreateOptions.again says when it may):
 * never another requester's record, nor a run that has not ended (not yet: `unavailable`).
 */
export function takenId(earlier: JobRow, opts: JobCreateOptions): DmsError | null {
  if (!opts.again) return new DmsError('conflict', `job ${earlier.id} already exists`);
  if ((opts.requester ?? null) !== (earlier.requester ?? null)) return new DmsError('conflict', `job ${earlier.id} exists here, placed by another node`);
  // Not a refusal of the job but a wait: its placement asks again once the run is over.
  if (!isTerminal(earlier.status)) return new DmsError('unavailable', `job ${earlier.id} has a run here that has not ended (${earlier.status})`, { retryAfter: 1 });
  return null;
}

/**
 * Applies `change` to `row` in place and returns the event recording it; throws conflict,
 * touching nothing, for a transition the job model forbids.
 */
export function transition(row: JobRow, change: JobChange, now: Date): NewJobEvent {
  const from = row.status;
  const to = change.status ?? from;
  const refused = refusedTransition(from, to);
  if (refused) throw new DmsError('conflict', `job ${row.id} ${refused}`);
  if (change.node !== undefined) row.node = change.node;
  if (change.exit_code !== undefined) row.exit_code = change.exit_code;
  if (change.container_id !== undefined) row.container_id = change.container_id;
  if (change.pending_reason !== undefined) row.pending_reason = change.pending_reason;
  if (change.error !== undefined) row.error = change.error;
  if (change.attempts !== undefined) row.attempts = change.attempts;
  if (change.outputs !== undefined) row.outputs = change.outputs;
  if (change.manifest !== undefined) row.manifest = change.manifest;
  // A reason only describes a wait; once the job left pending it would mislead.
  if (to !== 'pending') row.pending_reason = null;
  if (to === 'failed') row.error ??= change.reason;
  row.status = to;
  row.updated_at = now;
  return { job_id: row.id, at: now, from_status: from, to_status: to, reason: change.reason };
}

export function toJob(row: JobRow): Job {
  return {
    id: row.id,
    name: row.name,
    image: row.image,
    command: row.command,
    environment: row.environment,
    secrets: row.secrets ?? {},
    resources: row.resources,
    executor: row.executor,
    status: row.status,
    node: row.node ?? null,
    exit_code: row.exit_code ?? null,
    error: row.error ?? null,
    pending_reason: row.pending_reason ?? null,
    timeout_s: row.timeout_s ?? null,
    container_id: row.container_id ?? null,
    placement: row.placement ?? null,
    requester: row.requester ?? null,
    attempts: row.attempts ?? [],
    outputs: row.outputs ?? [],
    inputs: row.inputs ?? [],
    manifest: row.manifest ?? null,
    ports: row.ports ?? [],
    ensemble: row.ensemble ?? null,
    part: row.part ?? null,
    created_at: row.created_at.toISOString(),
    updated_at: row.updated_at.toISOString(),
  };
}
