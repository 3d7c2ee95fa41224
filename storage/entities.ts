/**
 * Table mappings. Rows hold the JSON contract's snake_case names so repositories can turn a
 * row into its API shape without renaming. The schema itself is owned by the migrations in
 * ./migrations; a test checks that these mappings and the migrated schema agree.
 */
import { defineEntity } from '@mikro-orm/core';
import type { Attempt, JobStatus, Labels, Location, Placement, ResourceSpec } from '../behaviors/jobs/schema.js';
import type { InputSpec, JobOutput } from '../behaviors/jobs/files.js';
import type { EnsembleSpec, EnsembleStatus } from '../behaviors/ensembles/schema.js';

export const JobEntity = defineEntity({
  name: 'Job',
  tableName: 'job',
  indexes: [
    { properties: ['status', 'created_at'], name: 'job_status_created_at_index' },
    { properties: 'ensemble', name: 'job_ensemble_index' },
  ],
  properties: (p) => ({
    id: p.string().primary(),
    name: p.string(),
    image: p.string(),
    command: p.json<string[]>(),
    environment: p.json<Record<string, string>>(),
    secrets: p.json<Record<string, string>>().default('{}'),
    resources: p.json<ResourceSpec>(),
    executor: p.string().default('docker'),
    // A plain string rather than an enum column: SQLite can only change a CHECK constraint by
    // rebuilding the table, and the repository validates transitions anyway.
    status: p.string().$type<JobStatus>(),
    node: p.string().nullable(),
    exit_code: p.integer().nullable(),
    error: p.text().nullable(),
    pending_reason: p.text().nullable(),
    timeout_s: p.integer().nullable(),
    container_id: p.string().nullable(),
    placement: p.json<Placement>().nullable(),
    requester: p.string().nullable(),
    attempts: p.json<Attempt[]>().default('[]'),
    outputs: p.json<JobOutput[]>().default('[]'),
    inputs: p.json<InputSpec[]>().default('[]'),
    manifest: p.text().nullable(),
    ports: p.json<number[]>().default('[]'),
    ensemble: p.string().nullable(),
    part: p.string().nullable(),
    created_at: p.datetime(),
    updated_at: p.datetime(),
  }),
});

export const JobEventEntity = defineEntity({
  name: 'JobEvent',
  tableName: 'job_event',
  indexes: [{ properties: 'job_id', name: 'job_event_job_id_index' }],
  properties: (p) => ({
    id: p.integer().primary().autoincrement(),
    job_id: p.string(),
    at: p.datetime(),
    from_status: p.string().$type<JobStatus>().nullable(),
    to_status: p.string().$type<JobStatus>(),
    reason: p.text(),
  }),
});

export const AllocationEntity = defineEntity({
  name: 'Allocation',
  tableName: 'allocation',
  indexes: [{ properties: 'job_id', name: 'allocation_job_id_index' }],
  properties: (p) => ({
    id: p.string().primary(),
    resources: p.json<ResourceSpec>(),
    job_id: p.string().nullable(),
    created_at: p.datetime(),
    released_at: p.datetime().nullable(),
  }),
});

/** A single row (id 1): the device has one set of settings. */
export const DeviceSettingEntity = defineEntity({
  name: 'DeviceSetting',
  tableName: 'device_setting',
  properties: (p) => ({
    id: p.integer().primary().autoincrement(false),
    name: p.string(),
    location: p.json<Location>(),
    labels: p.json<Labels>().default('{}'),
    onboarded: p.json<ResourceSpec>().nullable(),
  }),
});

/** An ensemble (README "Ensembles"): its parts are jobs, found by their `ensemble` column. */
export const EnsembleEntity = defineEntity({
  name: 'Ensemble',
  tableName: 'ensemble',
  indexes: [{ properties: 'created_at', name: 'ensemble_created_at_index' }],
  properties: (p) => ({
    id: p.string().primary(),
    name: p.string(),
    spec: p.json<EnsembleSpec>(),
    status: p.string().$type<EnsembleStatus>(),
    reason: p.text().nullable(),
    attempts: p.integer().default(0),
    /** Restarts of each part after a failure, by part name. */
    restarts: p.json<Record<string, number>>().default('{}'),
    created_at: p.datetime(),
    updated_at: p.datetime(),
  }),
});

/**
 * A cancel of a job placed elsewhere that its provider has not confirmed yet
 * (actors/executors/cancel-outbox.ts): kept so the requester asks it again after a restart too.
 */
export const WaitingCancelEntity = defineEntity({
  name: 'WaitingCancel',
  tableName: 'waiting_cancel',
  properties: (p) => ({
    job_id: p.string().primary(),
    node: p.string(),
    reason: p.text(),
    since: p.datetime(),
  }),
});

export const ENTITIES = [JobEntity, JobEventEntity, AllocationEntity, DeviceSettingEntity, EnsembleEntity, WaitingCancelEntity];
