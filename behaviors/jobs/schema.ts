/**
 * The job and resource shapes, declared once: REST validates requests with these schemas,
 * storage and executors use the inferred types, so the wire shape cannot drift from the
 * stored one. Field names are snake_case because they are the JSON contract (the README's REST interface).
 */
import { z } from 'zod';
import { parseSize, SizeError } from '../../runtime/bytes.js';
import { acceptsAlso } from '../input-forms.js';
import { ImageReferenceSchema } from './image-ref.js';
import { InputSpecSchema, JobOutputSchema, mountPointIssues, OutputSpecSchema, MAX_INPUTS, MAX_OUTPUTS } from './files.js';


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
 * At most Number.MAX_SAFE_INTEGER (8 PiB): past it a number of bytes is no longer counted
 * exactly (parseSize refuses a string past it too), and no machine has that much memory or disk.
 */
const bytes = z
  .int({ error: (iss) => (iss.code === 'too_big' ? `${String(iss.input)} bytes is too large: a size is at most ${Number.MAX_SAFE_INTEGER} bytes (8 PiB)` : SIZE_FORMS) })
  .nonnegative({ error: (iss) => `${String(iss.input)} is negative: a size is 0 bytes or more` });
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

/** A field left out says so, rather than reading as a value of the wrong form. */
const missingOr = (input: unknown, forms: string): string => (input === undefined ? `required (${forms})` : forms);

/** `{"size": …}`, or the size alone. */
const sized = () => {
  const canonical = z.strictObject(
    { size: SizeSchema },
    { error: (issue) => (issue.code === 'invalid_type' ? missingOr(issue.input, `${SIZE_FORMS}; or {"size": one of those}`) : undefined) },
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

/**
 * The least that may be asked of cores or memory, other than 0 (none asked, or the defaults
 * for a job). The engine refuses a container below these (NanoCpus under 0.01 cores, Memory
 * under 6 MiB: "Minimum memory limit allowed is 6MB"), and a tinier amount would count as
 * nothing in the ledger while the job ran without its limit.
 */
export const RESOURCE_FLOOR = { cores: 0.01, memoryBytes: 6 * 1024 * 1024 } as const;

/**
 * Cores in whole millicores, rounded UP: the ledger counts and the executor limits in these, so
 * no amount above 0 becomes 0 and every place agrees on what a job holds. Any amount above 0 is
 * at least the floor. Rounded to nanocores first so that binary fractions (0.57 * 1000 =
 * 570.0000000000001) do not round up a millicore they do not ask for.
 */
export function millicoresOf(cores: number): number {
  if (!(cores > 0)) return 0;
  return Math.max(RESOURCE_FLOOR.cores * 1000, Math.ceil(Math.round(cores * 1e6) / 1e3));
}

/**
 * The most cores any amount may hold. Far above what a machine has (Linux runs on at most 8192
 * CPUs, NR_CPUS), and low enough that the engine's nanocores (cores * 1e9, Docker's NanoCpus)
 * stay a whole number counted exactly (1e15 < 2^53): 1e308 cores overflowed to Infinity on
 * its way to millicores, then travelled as null.
 */
export const MAX_CORES = 1_000_000;
const cores = z
  .number({ error: (iss) => (iss.code === 'invalid_type' ? CORES_FORMS : undefined) })
  .nonnegative({ error: (iss) => `${String(iss.input)} is negative: cores are 0 or more` })
  .max(MAX_CORES, { error: (iss) => `${String(iss.input)} cores is too many: at most ${MAX_CORES}` });
/** Cores held or offered: any amount, rounded up to whole millicores as the ledger counts them. */
const roundedCores = cores.transform((n) => millicoresOf(n) / 1000);
const cpu = (coresSchema: typeof cores | typeof roundedCores) => {
  const canonical = z.strictObject({ cores: coresSchema }, { error: (issue) => (issue.code === 'invalid_type' ? missingOr(issue.input, CORES_FORMS) : undefined) });
  /** `{"cores": …}`, or the number alone. */
  return acceptsAlso(
    z.preprocess((value: number | { cores: number }) => (typeof value === 'number' ? { cores: value } : value), canonical),
    z.union([cores, canonical]),
  );
};
const CpuSchema = cpu(cores);
const AskedCpuSchema = cpu(roundedCores);

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

/** What is asked (a job, an allocation, an onboarded share): cores and memory are 0 or at least RESOURCE_FLOOR. */
const askedFields = { ...resourceFields, cpu: AskedCpuSchema };

/**
 * An amount of resources: what a machine has, what is held or free (ResourceCapacity is the
 * same shape). Zero cores or zero memory means none; `gpu` is left out when none.
 * Each field may be written short: `{"cpu": 0.5, "memory": "512MiB", "storage": "10GB", "gpu": 1}`.
 */
export const ResourceSpecSchema = z.strictObject(resourceFields);
/**
 * What is asked for or offered (a job spec, an offer, a lease, an allocation, the onboarded
 * share): as ResourceSpecSchema, but cores other than 0 are rounded up to whole millicores and
 * at least RESOURCE_FLOOR.cores, so no amount counts as 0 in the ledger or runs unlimited.
 * Amounts the node reports (free, held) keep the plain schema.
 */
export const ResourceRequestSchema = z.strictObject(askedFields);
export type ResourceSpec = z.output<typeof ResourceSpecSchema>;
export type ResourceCapacity = ResourceSpec;
export type GpuSpec = z.output<typeof GpuSpecSchema>;

export const JOB_STATUSES = ['pending', 'running', 'completed', 'failed'] as const;
export const JobStatusSchema = z.enum(JOB_STATUSES);
export type JobStatus = z.output<typeof JobStatusSchema>;

/** Completed and failed jobs never change again. */
export const isTerminal = (status: JobStatus): boolean => status === 'completed' || status === 'failed';

/**
 * Linux's MAX_ARG_STRLEN: the most bytes one argument, or one NAME=value of the environment, may
 * take with its NUL. Past it the container's exec fails at its start ("argument list too long").
 */
const MAX_ARG_STRLEN = 128 * 1024;
/**
 * The most bytes a job's command and environment may take together, as Linux counts them (each
 * string with its NUL and a pointer to it). Linux gives a new program's arguments and
 * environment together a quarter of its stack limit, 2 MiB under the default 8 MiB; the rest
 * is for what the job does not write but is given too: the image's ENV and ENTRYPOINT, and the
 * engine's PATH, HOSTNAME and HOME.
 */
export const MAX_PROCESS_BYTES = 1024 * 1024;
/**
 * No program's variable has a name near this: names are shown wherever the job is (`jobs
 * describe` lists even the secrets' names), where a name of 100 KB was only a way to fill answers.
 */
const MAX_ENV_NAME_BYTES = 256;

const utf8 = new TextEncoder();
const byteLength = (s: string): number => utf8.encode(s).length;

// Docker passes the environment as NAME=value strings, so a name holding '=' would be cut.
const envName = z
  .string()
  .regex(/^[A-Za-z_][A-Za-z0-9_]*$/, 'environment names are letters, digits and _')
  .max(MAX_ENV_NAME_BYTES, `an environment name is at most ${MAX_ENV_NAME_BYTES} bytes`);
/** Variables as a process is given them: each NAME=value within MAX_ARG_STRLEN. */
const envVariables = () =>
  z.record(envName, processText()).superRefine((env, ctx) => {
    for (const [name, value] of Object.entries(env)) {
      // A name past its bound is named by its own issue, and not again with its value.
      if (name.length > MAX_ENV_NAME_BYTES) continue;
      const size = byteLength(`${name}=${value}`);
      if (size >= MAX_ARG_STRLEN) ctx.addIssue({ code: 'custom', path: [name], message: `${name}=… is ${size} bytes, more than the ${MAX_ARG_STRLEN - 1} Linux passes as one variable (MAX_ARG_STRLEN, 128 KiB with its NUL)` });
    }
  });

/**
 * A job's resources: as ResourceSpecSchema, but every field may be left out, as may
 * `resources` itself. What is left out is asked as zero, which the orchestrator replaces with
 * `jobs.default_resources` (1 core, 512 MiB as shipped) before storing the job.
 */
export const JobResourcesSchema = z.strictObject({
  ...askedFields,
  cpu: AskedCpuSchema.default({ cores: 0 }),
  memory: sized().default({ size: 0 }),
});

const COMMAND_FORMS = 'a string (run as sh -c <string>) or an array of strings';

/**
 * The command: an array is the argv as it is; a string is given to `sh -c`, so it reads as it
 * would at a shell prompt (quotes, &&, pipes) without this node splitting it. The image must
 * then have a shell. Empty or left out: the image's own command.
 */
/** What a process is given (its arguments, its environment's values) ends at a NUL: none may hold one. */
function processText(error?: string) {
  return z.string(error ? { error } : undefined).refine((s) => !s.includes('\0'), 'a NUL character cannot be passed to a process');
}
const argument = processText(COMMAND_FORMS).superRefine((arg, ctx) => {
  const size = byteLength(arg);
  if (size >= MAX_ARG_STRLEN) ctx.addIssue({ code: 'custom', message: `${size} bytes, more than the ${MAX_ARG_STRLEN - 1} Linux passes as one argument (MAX_ARG_STRLEN, 128 KiB with its NUL)` });
});
const argv = z.array(argument, { error: COMMAND_FORMS });
const CommandSchema = acceptsAlso(
  z.preprocess((value: string | string[]) => (typeof value === 'string' ? (value === '' ? [] : ['sh', '-c', value]) : value), argv),
  z.union([z.string().meta({ description: 'run as sh -c <string>' }), argv]),
);

export const LocationSchema = z.strictObject({
  region: z.string().max(100).optional(),
  country: z.string().max(100).optional(),
  city: z.string().max(100).optional(),
});
export type Location = z.output<typeof LocationSchema>;

/** Device labels (`{"gpu": "a100", "zone": "lab"}`), which a job's placement may ask for. */
const labelKey = z.string().regex(/^[A-Za-z0-9][A-Za-z0-9._/-]{0,62}$/, 'label names are letters, digits and . _ / - (at most 63)');
export const LabelsSchema = z
  .record(labelKey, z.string().max(200))
  .refine((labels) => Object.keys(labels).length <= 32, { error: 'at most 32 labels' });
export type Labels = z.output<typeof LabelsSchema>;

/**
 * A libp2p peer id as `dms peers list` prints it: base58btc of an identity or sha256
 * multihash (12D3Koo… for Ed25519 keys, Qm… for older RSA ones).
 */
export const PeerIdSchema = z.string().regex(/^(12D3KooW[1-9A-HJ-NP-Za-km-z]{44}|Qm[1-9A-HJ-NP-Za-km-z]{44})$/, 'not a valid peer id (e.g. 12D3KooW…, as dms peers list prints it)');

/** The most placements a job may use when the nodes running it fail. */
export const MAX_ATTEMPTS = 10;

/**
 * Where a job may run. Left out: on any node of the network that can hold it, this node
 * included (the README's Placement section says how the node is chosen).
 */
export const PlacementSchema = z
  .strictObject({
    /** Run exactly on this node. */
    node: PeerIdSchema.optional(),
    /** Only on nodes whose device location matches every field given. */
    location: LocationSchema.optional(),
    /** Only on nodes whose device labels include every one given. */
    labels: LabelsSchema.optional(),
    /** Never leave the node it was submitted on. */
    local: z.boolean().optional(),
    /** How many placements the job may use when the nodes running it fail or vanish. */
    max_attempts: z.int().min(1).max(MAX_ATTEMPTS).default(3),
  })
  .refine((p) => !(p.local && p.node), { error: 'local and node exclude each other: local keeps the job here', path: ['local'] });
export type Placement = z.output<typeof PlacementSchema>;

/** The most ports one job may declare: each is a listener a tunnel may reach, so they are bounded. */
export const MAX_JOB_PORTS = 16;

/** TCP ports the job listens on inside its container, which its requester may reach through a tunnel (README "Ports and tunnels"). */
export const JobPortsSchema = z
  .array(z.int().min(1, 'a port is from 1 to 65535').max(65535, 'a port is from 1 to 65535'))
  .max(MAX_JOB_PORTS, `at most ${MAX_JOB_PORTS} ports`)
  .refine((ports) => new Set(ports).size === ports.length, { error: 'ports: each port at most once' });

/**
 * Why a job's process could not be given its command and environment together (the container's
 * exec would fail at its start), as an issue; what a secret replaces counts once, as it runs.
 */
export function processSpaceIssues(spec: { command?: unknown; environment?: unknown; secrets?: unknown }, ctx: z.RefinementCtx): void {
  // Refinements run on a spec whose fields failed their own schemas too: those are named already.
  const texts = (v: unknown): v is Record<string, string> => typeof v === 'object' && v !== null && Object.values(v).every((x) => typeof x === 'string');
  const { command = [], environment = {}, secrets = {} } = spec;
  if (!Array.isArray(command) || !command.every((a) => typeof a === 'string') || !texts(environment) || !texts(secrets)) return;
  const strings = [...command, ...Object.entries(runEnvironment({ environment, secrets })).map(([name, value]) => `${name}=${value}`)];
  const POINTER = 8;
  const total = strings.reduce((sum, s) => sum + byteLength(s) + 1 + POINTER, 0);
  if (total > MAX_PROCESS_BYTES) {
    ctx.addIssue({
      code: 'custom',
      message: `command, environment and secrets: ${total} bytes together (each string with its NUL and an 8-byte pointer, as Linux counts them), ${total - MAX_PROCESS_BYTES} more than the ${MAX_PROCESS_BYTES} (1 MiB) a job's process may be given`,
    });
  }
}

/**
 * JobSpecSchema's fields without its checks across them, for the schemas made from it (a part's,
 * a deployed job's): zod refuses to omit or replace fields of a refined object. Those add
 * processSpaceIssues themselves.
 */
export const JobSpecFields = z.strictObject({
  name: z.string().min(1).max(200),
  /** Checked against Docker's reference grammar (./image-ref.ts) before any engine sees it. */
  image: ImageReferenceSchema,
  command: CommandSchema.default([]),
  environment: envVariables().default({}),
  /**
   * Injected as environment variables like `environment`, but sent only to providers this
   * node trusts (`placement.trust`): `environment` goes to whichever node runs the job.
   */
  secrets: envVariables().default({}),
  resources: JobResourcesSchema.default({ cpu: { cores: 0 }, memory: { size: 0 }, storage: { size: 0 } }),
  executor: z.string().min(1).max(64).default('docker'),
  timeout_s: z.int().positive().optional(),
  placement: PlacementSchema.optional(),
  /** Files the job leaves, each imported and signed for when it ends (README "Job outputs"). */
  outputs: z
    .array(OutputSpecSchema)
    .max(MAX_OUTPUTS)
    .refine((list) => new Set(list.map((o) => o.name)).size === list.length, { error: 'output names must be distinct' })
    .default([]),
  /** Content mounted read-only into the container before it starts. */
  inputs: z
    .array(InputSpecSchema)
    .max(MAX_INPUTS)
    .superRefine(mountPointIssues)
    .default([]),
  ports: JobPortsSchema.default([]),
});
/** What POST /api/v1/jobs accepts. Unknown fields are rejected so a typo is not silently ignored. */
export const JobSpecSchema = JobSpecFields.superRefine(processSpaceIssues);
/** A spec as a caller writes it (defaults not yet applied). */
export type JobSpecInput = z.input<typeof JobSpecSchema>;
export type JobSpec = z.output<typeof JobSpecSchema>;

const time = z.iso.datetime({ offset: true });

/** One placement of a job: where it went and how that ended (null while it lasts). */
export const AttemptSchema = z.object({
  node: z.string(),
  started_at: time,
  ended_at: time.nullable(),
  outcome: z.enum(['completed', 'failed', 'lost', 'refused']).nullable(),
  /** Why it ended that way, when it did not complete. */
  reason: z.string().nullable(),
});
export type Attempt = z.output<typeof AttemptSchema>;

export const JobSchema = z.object({
  id: z.uuid(),
  name: z.string(),
  image: z.string(),
  command: z.array(z.string()),
  environment: z.record(z.string(), z.string()),
  secrets: z.record(z.string(), z.string()),
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
  /** Where it may run, as submitted; null: anywhere that can hold it. */
  placement: PlacementSchema.nullable(),
  /** Peer id of the node it was submitted on. */
  requester: z.string().nullable(),
  /** Each placement it used, oldest first: the node, when it ran there and how that ended. */
  attempts: z.array(AttemptSchema),
  /** As asked; once it ended, as its provider's signed manifest lists them (with cid and size). */
  outputs: z.array(JobOutputSchema),
  inputs: z.array(InputSpecSchema),
  /** The signed result manifest (base64), once the job ended with outputs to report: anyone can check who produced what. */
  manifest: z.string().nullable(),
  /** TCP ports it listens on, which its requester may forward to (`dms jobs port-forward`). */
  ports: z.array(z.int()),
  /** The ensemble it is a part of (README "Ensembles"), and which part; null for a job of its own. */
  ensemble: z.uuid().nullable(),
  part: z.string().nullable(),
  created_at: time,
  updated_at: time,
});
export type Job = z.output<typeof JobSchema>;

/** The variables a run is given: its environment and its secrets, a secret winning over a variable of the same name. */
export const runEnvironment = (job: Pick<Job, 'environment' | 'secrets'>): Record<string, string> => ({ ...job.environment, ...job.secrets });

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
  resources: ResourceRequestSchema,
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

/** The operator's settings for this device (PUT /api/v1/device/config). */
export const DeviceSettingsSchema = z.strictObject({
  name: z.string().max(200),
  location: LocationSchema,
  /** What jobs may ask for in `placement.labels`. */
  labels: LabelsSchema.default({}),
  /** The share of the machine's capacity offered to the network; null until onboarded. */
  onboarded: ResourceRequestSchema.nullable(),
});
export type DeviceSettings = z.output<typeof DeviceSettingsSchema>;

/**
 * Bytes of JSON the published settings (name, location, labels) may take together: half of
 * what peers keep of a profile (MAX_PROFILE_BYTES, behaviors/discovery.ts), the rest being its
 * addresses, executors and share. Each field within its own bounds, 32 labels of 200 characters
 * made a profile of 9 KiB, which every peer refused whole: the node was never offered a job.
 */
export const MAX_PUBLISHED_SETTINGS_BYTES = 4096;

/** Why peers would not keep a profile showing `settings`, or null. */
export function publishedSettingsProblem(settings: Pick<DeviceSettings, 'name' | 'location' | 'labels'>): string | null {
  const bytes = new TextEncoder().encode(JSON.stringify({ name: settings.name, location: settings.location, labels: settings.labels })).length;
  if (bytes <= MAX_PUBLISHED_SETTINGS_BYTES) return null;
  return `name, location and labels: ${bytes} bytes of JSON, more than the ${MAX_PUBLISHED_SETTINGS_BYTES} a profile leaves them (peers refuse a larger profile whole); use fewer or shorter labels`;
}
// Without its default: a patch leaves out what it does not change, and a default here would
// reset the labels on every patch that does not name them (an onboarding, a rename).
export const DeviceSettingsPatchSchema = DeviceSettingsSchema.extend({ labels: LabelsSchema }).partial();
export type DeviceSettingsPatch = z.input<typeof DeviceSettingsPatchSchema>;
/** A patch once parsed: sizes in bytes, every resource in its canonical form. */
export type DeviceSettingsChanges = z.output<typeof DeviceSettingsPatchSchema>;
