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
  /** Held by allocations and running jobs. */
  allocated: ResourceSpecSchema,
  /** Onboarded minus allocated: what a new job or allocation can still get. */
  free: ResourceSpecSchema,
  /**
   * Whether the operator onboarded a share: until then `onboarded` is the whole machine for this
   * node's own jobs, and nothing is offered to the network.
   */
  offered: z.boolean(),
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

export const ReserveReply = z.object({
  granted: z.array(z.string()),
  /** Jobs that do not fit now, each with the resource that is short. */
  refused: z.array(z.object({ job_id: z.string(), reason: z.string() })),
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
export const ReleaseReply = z.object({ released: z.int().nonnegative() });

export const AllocatePayload = AllocationRequestSchema;
export const AllocationListPayload = z.strictObject({
  /** Also list released allocations (default: only those still held). */
  all: z.boolean().default(false),
});
export const DeallocatePayload = z.strictObject({ id: z.string().min(1).max(100) });

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
