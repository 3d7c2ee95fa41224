/**
 * The resource manager's behaviors: what this device offers, what is reserved, and the
 * device's own settings. Allocations are reservations made by people or other nodes; jobs
 * reserve through /dms/resources/reserve while they run.
 */
import { z } from 'zod';
import {
  AllocationRequestSchema,
  DeviceSettingsPatchSchema,
  LabelsSchema,
  LocationSchema,
  type ResourceSpec,
  ResourceSpecSchema,
} from './schema.js';
import { VolumeNameSchema } from './files.js';
import { callerId } from '../caller-id.js';

/** Inbox of the resource manager actor on every node. */
export const RESOURCES_INBOX = 'resources';

export const ResourceBehaviors = {
  usage: '/dms/resources/usage',
  /** Reserve resources for jobs about to run (the orchestrator). */
  reserve: '/dms/resources/reserve',
  /** Give back what jobs reserved (the orchestrator, when they end). */
  release: '/dms/resources/release',
  /**
   * Hold a job's resources for a short while (the deployment actor, for another node's job
   * about to be started here): the lease ends by itself unless the job reserves them first.
   */
  lease: '/dms/resources/lease',
  /** What this node offers a job now: free share, load, location and labels (the deployment actor's bids). */
  offer: '/dms/resources/offer',
  allocate: '/dms/allocations/create',
  allocations: '/dms/allocations/list',
  deallocate: '/dms/allocations/release',
} as const;

/**
 * Storage held by the node's own content (README "Job outputs"), counted against the same
 * onboarded share as jobs and allocations: the blocks it keeps (measured), its volumes (their
 * size, from their creation), and uploads while they are written (claimed, then released once
 * their blocks are counted).
 */
export const StorageBehaviors = {
  /** Hold storage for an upload (the HTTP actor): at most what is free, refused naming sizes when less than it declares. */
  claim: '/dms/resources/storage/claim',
  release: '/dms/resources/storage/release',
} as const;

/** Volumes (named directories jobs here mount), each holding its size of the share from its creation to its removal. */
export const VolumeBehaviors = {
  create: '/dms/volumes/create',
  list: '/dms/volumes/list',
  remove: '/dms/volumes/remove',
} as const;

const bytes = z.int().nonnegative().max(Number.MAX_SAFE_INTEGER);

export const StorageClaimPayload = z.strictObject({
  holder: z.string().regex(/^upload:[A-Za-z0-9-]{1,64}$/, 'upload:<id>'),
  /** Most bytes the upload may take (blocks.max_upload_bytes); it is granted no more than is free. */
  at_most: bytes.min(1),
  /** Bytes the upload says it holds (a file's Content-Length): refused at once when more than is free. */
  size: bytes.optional(),
});
export const StorageClaimReply = z.object({
  holder: z.string(),
  /** Bytes of content the upload may write. */
  granted: bytes,
  /** Free storage of the share before this claim, and the share's storage. */
  free: bytes,
  onboarded: bytes,
});
export type StorageClaim = z.output<typeof StorageClaimReply>;
export const StorageReleasePayload = z.strictObject({ holder: StorageClaimPayload.shape.holder });
export const StorageReleaseReply = z.object({ released: z.boolean() });

export const VolumeSchema = z.object({ name: z.string(), size: z.int(), created_at: z.string() });
/** A volume's size is taken from the storage share: one of 0 bytes would hold none of it and be no volume. */
export const VolumeSizeSchema = bytes.min(1, 'a volume holds at least 1 byte of the storage share: give its size, e.g. 1GiB');
export const VolumeCreatePayload = z.strictObject({ name: VolumeNameSchema, size: VolumeSizeSchema });
export const VolumeNamePayload = z.strictObject({ name: VolumeNameSchema });
export const VolumeListReply = z.array(VolumeSchema);

/** What the node's own content holds of the storage share. */
export const StoredSchema = z.object({
  /** Bytes of the blocks held (uploads, outputs, fetched inputs). */
  blocks: bytes,
  /** The sizes of the volumes, summed. */
  volumes: bytes,
  /** Uploads being written now, as claimed. */
  uploads: bytes,
});

export const DeviceBehaviors = {
  status: '/dms/device/status',
  configure: '/dms/device/config',
} as const;

export const EmptyPayload = z.strictObject({});

export const UsageReply = z.object({
  /** What the machine has. */
  capacity: ResourceSpecSchema,
  /** The share of it offered to jobs and allocations (the whole machine until the operator sets one). */
  onboarded: ResourceSpecSchema,
  /** Held by allocations, running jobs, and (storage) the node's blocks, volumes and uploads. */
  allocated: ResourceSpecSchema,
  /** Onboarded minus allocated: what a new job or allocation can still get. */
  free: ResourceSpecSchema,
  /**
   * Whether the operator onboarded a share: until then `onboarded` is the whole machine for this
   * node's own jobs, and nothing is offered to the network.
   */
  offered: z.boolean(),
  /** Of `allocated`, the storage the node's own content holds: blocks, volumes, uploads under way. */
  stored: StoredSchema,
  /**
   * The images this node pulled for jobs, as last measured: outside the share, kept within
   * jobs.max_images_bytes (README "Pulled images are bounded"); null on a node without the Docker executor's record.
   */
  images: z
    .object({ bytes: z.number().int().nonnegative(), count: z.number().int().nonnegative(), max_bytes: z.number().int().nonnegative() })
    .nullable(),
});
export type Usage = z.output<typeof UsageReply>;

const jobId = z.string().min(1).max(100);

export const ReservePayload = z.strictObject({
  /** In priority order; each is granted if it fits what the ones before it left. */
  jobs: z.array(z.strictObject({ job_id: jobId, resources: ResourceSpecSchema })).max(1000),
  /** Grant even beyond the onboarded share: jobs found still running after a restart already hold it. */
  force: z.boolean().default(false),
});
export type ReservePayload = z.input<typeof ReservePayload>;

/**
 * What is free once the reply's own change is made, and the version of the manager's ledger it
 * was read at (every reservation and release bumps it): replies may reach the orchestrator in
 * another order than the manager sent them, and the higher version is the newer word.
 */
const FreeNow = {
  free: ResourceSpecSchema,
  /** The whole share (OfferReply.offering): a job asking more than it could never be reserved here. */
  offering: ResourceSpecSchema,
  version: z.int().nonnegative(),
};
export type FreeNow = z.output<z.ZodObject<typeof FreeNow>>;

export const ReserveReply = z.object({
  granted: z.array(z.string()),
  /** Jobs that do not fit now, each with the resource that is short. */
  refused: z.array(z.object({ job_id: z.string(), reason: z.string() })),
  ...FreeNow,
});
export type ReserveReply = z.output<typeof ReserveReply>;

export const ReleasePayload = z.strictObject({ job_ids: z.array(jobId).max(10_000) });

/** What a bid is made from, in one answer. */
export const OfferReply = z.object({
  /** The share onboarded for others' jobs (the whole machine's before onboarding). */
  offering: ResourceSpecSchema,
  free: ResourceSpecSchema,
  /** Share of the offered cores or memory (the larger) held now: 0 idle, 1 full. */
  load: z.number().min(0).max(1),
  /** Whether the operator onboarded a share: until then the node runs its own jobs only. */
  offered: z.boolean(),
  location: LocationSchema,
  labels: LabelsSchema,
});
export type Offer = z.output<typeof OfferReply>;

/** An offer's `load`: the share of `offering`'s cores or memory (the larger) that `held` takes, 0 idle, 1 full. */
export function loadOf(held: { cores: number; memory: number }, offering: ResourceSpec): number {
  const part = (h: number, of: number) => (of > 0 ? Math.min(1, h / of) : 0);
  return Math.max(part(held.cores, offering.cpu.cores), part(held.memory, offering.memory.size));
}

/** The longest a lease may hold resources without its job starting. */
/** Holds a job's share until it starts or its deployment releases it (the deployment machine keeps the lease's time). */
export const LeasePayload = z.strictObject({
  job_id: jobId,
  resources: ResourceSpecSchema,
});
export const LeaseReply = z.object({ job_id: jobId });
export const ReleaseReply = z.object({ released: z.int().nonnegative(), ...FreeNow });

/** Resources were freed here (a lease, an allocation, a volume, a grown share); `version` as in FreeNow. */
export const SchedulePayload = z.strictObject({ version: z.int().nonnegative().optional() });

/** Word that resources were freed: what is free (a release's reply), or only when (a schedule). */
export type Freed = FreeNow | z.output<typeof SchedulePayload>;

export const AllocatePayload = AllocationRequestSchema;
export const AllocationListPayload = z.strictObject({
  /** Also list released allocations (default: only those still held). */
  all: z.boolean().default(false),
});
export const DeallocatePayload = z.strictObject({ id: callerId('an allocation id') });

export const DEVICE_STATUSES = ['online', 'busy', 'offline'] as const;

/** A node as the resource manager reports it (`/dms/device/status`). */
export const DeviceSchema = z.object({
  /** The node's DID. */
  id: z.string(),
  name: z.string(),
  status: z.enum(DEVICE_STATUSES),
  /** The onboarded capacity (ResourceCapacity). */
  resources: ResourceSpecSchema,
  location: LocationSchema,
  labels: LabelsSchema,
  last_seen: z.iso.datetime({ offset: true }),
});
export type Device = z.output<typeof DeviceSchema>;

export const ConfigurePayload = DeviceSettingsPatchSchema;
