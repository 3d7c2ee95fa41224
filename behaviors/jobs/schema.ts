/**
 * The job and resource shapes, declared once: REST validates requests with these schemas,
 * storage and executors use the inferred types, so the wire shape cannot drift from the
 * stored one. Field names are snake_case because they are the JSON contract (the README's REST interface).
 */
import { z } from 'zod';
import { invalid } from '../../runtime/errors.js';
import { parseSize, SizeError } from '../../runtime/bytes.js';
import { describeIssues } from '../../runtime/issues.js';
import { acceptsAlso } from '../input-forms.js';
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

/*
 * Sizes, cores and commands as people write them. Each field accepts a short form and the
 * canonical one, and is normalised here (z.preprocess) to the canonical form, which is what is
 * stored and answered: validation, the inferred types and the error messages all come from
 * these declarations. The canonical form parses to itself, so stored records and older
 * clients (sizes as numbers of bytes, `{"cpu": {"cores": 1}}`) keep working.
 */

const SIZE_FORMS = 'a size: bytes as a whole number, or a string with a unit ("512MiB", "2GB")';

/**
 * Bytes: a number is bytes (what clients always sent); a string carries its unit and is read
 * by client/sizes.ts parseSize, the same reader as the CLI's --memory and --storage flags.
 */
const bytes = z.int({ error: SIZE_FORMS }).nonnegative({ error: SIZE_FORMS });
export const SizeSchema = acceptsAlso(
  z.preprocess((value: number | string, ctx) => {
    if (typeof value !== 'string') return value;
    try {
      return parseSize(value);
    } catch (e) {
      if (!(e instanceof SizeError)) throw e;
      ctx.addIssue({ code: 'custom', message: e.message, input: value });
      return z.NEVER;
    }
  }, bytes),
  z.union([bytes, z.string().meta({ description: 'a size with its unit: B, KB…TB (powers of 1000) or KiB…TiB (powers of 1024), e.g. "512MiB"' })]),
);

/** `{"size": …}`, or the size alone. */
const sized = () => {
  const canonical = z.strictObject(
    { size: SizeSchema },
    { error: (issue) => (issue.code === 'invalid_type' ? `${SIZE_FORMS}; or {"size": one of those}` : undefined) },
  );
  return acceptsAlso(
    z.preprocess(
      (value: number | string | { size: number | string }) => (typeof value === 'number' || typeof value === 'string' ? { size: value } : value),
      canonical,
    ),
    z.union([SizeSchema, canonical]),
  );
};

const CORES_FORMS = 'cores as a number (0.5, 2) or {"cores": a number}';

const cores = z.number({ error: CORES_FORMS }).nonnegative();
const cpuCanonical = z.strictObject({ cores }, { error: (issue) => (issue.code === 'invalid_type' ? CORES_FORMS : undefined) });
/** `{"cores": …}`, or the number alone. */
const CpuSchema = acceptsAlso(
  z.preprocess((value: number | { cores: number }) => (typeof value === 'number' ? { cores: value } : value), cpuCanonical),
  z.union([cores, cpuCanonical]),
);

const GPU_FORMS = 'a number of GPUs, or {"count", "model", "vram"}';

const gpuCount = z.int().positive();
const gpuCanonical = z.strictObject(
  {
    count: gpuCount,
    model: z.string().min(1).optional(),
    /** Memory of each GPU in bytes, not the sum: a job needing `vram` needs it on every GPU it gets. */
    vram: SizeSchema.optional(),
  },
  { error: (issue) => (issue.code === 'invalid_type' ? GPU_FORMS : undefined) },
);
/** `{"count", "model", "vram"}`, or the count alone. */
export const GpuSpecSchema = acceptsAlso(
  z.preprocess(
    (value: number | { count: number; model?: string; vram?: number | string }) => (typeof value === 'number' ? { count: value } : value),
    gpuCanonical,
  ),
  z.union([gpuCount, gpuCanonical]),
);

const resourceFields = {
  cpu: CpuSchema,
  memory: sized(),
  storage: sized().default({ size: 0 }),
  gpu: GpuSpecSchema.optional(),
};

/**
 * What a job asks for, an allocation reserves and a machine offers (ResourceCapacity is the
 * same shape). Zero cores or zero memory means "no limit asked"; `gpu` is left out when none.
 * Each field may be written short: `{"cpu": 0.5, "memory": "512MiB", "storage": "10GB", "gpu": 1}`.
 */
export const ResourceSpecSchema = z.strictObject(resourceFields);
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

/**
 * A job's resources: as ResourceSpecSchema, but every field may be left out, as may
 * `resources` itself. What is left out is asked as zero, which the orchestrator replaces with
 * `jobs.default_resources` (1 core, 512 MiB as shipped) before storing the job.
 */
export const JobResourcesSchema = z.strictObject({
  ...resourceFields,
  cpu: CpuSchema.default({ cores: 0 }),
  memory: sized().default({ size: 0 }),
});

const COMMAND_FORMS = 'a string (run as sh -c <string>) or an array of strings';

/**
 * The command: an array is the argv as it is; a string is given to `sh -c`, so it reads as it
 * would at a shell prompt (quotes, &&, pipes) without this node splitting it. The image must
 * then have a shell. Empty or left out: the image's own command.
 */
const argv = z.array(z.string({ error: COMMAND_FORMS }), { error: COMMAND_FORMS });
const CommandSchema = acceptsAlso(
  z.preprocess((value: string | string[]) => (typeof value === 'string' && value !== '' ? ['sh', '-c', value] : value), argv),
  z.union([z.string().meta({ description: 'run as sh -c <string>' }), argv]),
);

/** What POST /api/v1/jobs accepts. Unknown fields are rejected so a typo is not silently ignored. */
export const JobSpecSchema = z.strictObject({
  name: z.string().min(1).max(200),
  /** Checked against Docker's reference grammar (./image-ref.ts) before any engine sees it. */
  image: ImageReferenceSchema,
  command: CommandSchema.default([]),
  environment: z.record(envName, z.string()).default({}),
  resources: JobResourcesSchema.default({ cpu: { cores: 0 }, memory: { size: 0 }, storage: { size: 0 } }),
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
/** A patch once parsed: sizes in bytes, every resource in its canonical form. */
export type DeviceSettingsChanges = z.output<typeof DeviceSettingsPatchSchema>;
