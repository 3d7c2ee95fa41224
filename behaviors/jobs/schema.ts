/**
 * The job and resource shapes, declared once: REST validates requests with these schemas,
 * storage and executors use the inferred types, so the wire shape cannot drift from the
 * stored one. Field names are snake_case because they are the JSON contract (DESIGN.md).
 */
import { z } from 'zod';
import { invalid } from '../../runtime/errors.js';
import { describeIssues } from '../../runtime/issues.js';
import { ImageReferenceSchema } from './image-ref.js';

/**
 * Parse or throw a DmsError of kind 'invalid' naming every bad field, so REST answers 400 and
 * actors reply with the same text.
 */
export function parseWith<S extends z.ZodType>(schema: S, value: unknown, what: string): z.output<S> {
  const result = schema.safeParse(value);
  if (result.success) return result.data;
  throw invalid(`invalid ${what}: ${describeIssues(result.error)}`);
}

const bytes = z.int().nonnegative();

export const GpuSpecSchema = z.strictObject({
  count: z.int().positive(),
  model: z.string().min(1).optional(),
  /** Memory of each GPU in bytes, not the sum: a job needing `vram` needs it on every GPU it gets. */
  vram: bytes.optional(),
});

/**
 * What a job asks for, an allocation reserves and a machine offers (ResourceCapacity is the
 * same shape). Zero cores or zero memory means "no limit asked"; `gpu` is left out when none.
 */
export const ResourceSpecSchema = z.strictObject({
  cpu: z.strictObject({ cores: z.number().nonnegative() }),
  memory: z.strictObject({ size: bytes }),
  storage: z.strictObject({ size: bytes }).default({ size: 0 }),
  gpu: GpuSpecSchema.optional(),
});
export type ResourceSpec = z.output<typeof ResourceSpecSchema>;
export type ResourceCapacity = ResourceSpec;
export type GpuSpec = z.output<typeof GpuSpecSchema>;

export const JOB_STATUSES = ['pending', 'running', 'completed', 'failed'] as const;
export const JobStatusSchema = z.enum(JOB_STATUSES);
export type JobStatus = z.output<typeof JobStatusSchema>;

/** Completed and failed jobs never change again. */
export const isTerminal = (status: JobStatus): boolean => status === 'completed' || status === 'failed';

// Docker passes the environment as NAME=value strings, so a name holding '=' would be cut.
const envName = z.string().regex(/^[A-Za-z_][A-Za-z0-9_]*$/, 'environment names are letters, digits and _');

/** What POST /api/v1/jobs accepts. Unknown fields are rejected so a typo is not silently ignored. */
export const JobSpecSchema = z.strictObject({
  name: z.string().min(1).max(200),
  /** Checked against Docker's reference grammar (./image-ref.ts) before any engine sees it. */
  image: ImageReferenceSchema,
  command: z.array(z.string()).default([]),
  environment: z.record(envName, z.string()).default({}),
  resources: ResourceSpecSchema,
  executor: z.string().min(1).max(64).default('docker'),
  timeout_s: z.int().positive().optional(),
});
/** A spec as a caller writes it (defaults not yet applied). */
export type JobSpecInput = z.input<typeof JobSpecSchema>;
export type JobSpec = z.output<typeof JobSpecSchema>;

const time = z.iso.datetime({ offset: true });

export const JobSchema = z.object({
  id: z.uuid(),
  name: z.string(),
  image: z.string(),
  command: z.array(z.string()),
  environment: z.record(z.string(), z.string()),
  resources: ResourceSpecSchema,
  executor: z.string(),
  status: JobStatusSchema,
  /** Peer id of the node that runs (or will run) the job; null until one is chosen. */
  node: z.string().nullable(),
  exit_code: z.int().nullable(),
  error: z.string().nullable(),
  /** Why a pending job is still waiting (e.g. no node has the resources). */
  pending_reason: z.string().nullable(),
  timeout_s: z.int().positive().nullable(),
  /** The executor's handle id (a container id for docker), kept to reattach after a restart. */
  container_id: z.string().nullable(),
  created_at: time,
  updated_at: time,
});
export type Job = z.output<typeof JobSchema>;

export const JobEventSchema = z.object({
  id: z.int(),
  job_id: z.uuid(),
  at: time,
  /** Null for the event that created the job. */
  from_status: JobStatusSchema.nullable(),
  to_status: JobStatusSchema,
  reason: z.string(),
});
export type JobEvent = z.output<typeof JobEventSchema>;

/** What POST /api/v1/allocations accepts. */
export const AllocationRequestSchema = z.strictObject({
  resources: ResourceSpecSchema,
  job_id: z.uuid().optional(),
});
export type AllocationRequest = z.input<typeof AllocationRequestSchema>;

export const AllocationSchema = z.object({
  id: z.uuid(),
  resources: ResourceSpecSchema,
  job_id: z.uuid().nullable(),
  created_at: time,
  /** Null while the resources are held. */
  released_at: time.nullable(),
});
export type Allocation = z.output<typeof AllocationSchema>;

export const LocationSchema = z.strictObject({
  region: z.string().optional(),
  country: z.string().optional(),
  city: z.string().optional(),
});
export type Location = z.output<typeof LocationSchema>;

/** The operator's settings for this device (PUT /api/v1/device/config). */
export const DeviceSettingsSchema = z.strictObject({
  name: z.string().max(200),
  location: LocationSchema,
  /** The share of the machine's capacity offered to the network; null until onboarded. */
  onboarded: ResourceSpecSchema.nullable(),
});
export type DeviceSettings = z.output<typeof DeviceSettingsSchema>;
export const DeviceSettingsPatchSchema = DeviceSettingsSchema.partial();
export type DeviceSettingsPatch = z.input<typeof DeviceSettingsPatchSchema>;
