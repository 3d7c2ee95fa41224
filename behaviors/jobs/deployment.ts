/**
 * Placing a job on another node: the deployment actor's behaviors (inbox `deployment` on every
 * node). A requester offers a job on the `/dms/deployment` topic (or to the one node it is
 * pinned to); nodes that can hold it answer with a bid; the requester reserves on the best
 * bidder (a lease that ends by itself) and then starts it there; the provider runs it as one of
 * its own jobs, and the requester follows it (status and output) until it ends. A job placed on
 * its own (not a part of an ensemble, which reserves every part before it starts any) sends its
 * start with its reserve: one round trip instead of two (ReserveRequest.start).
 *
 * Every behavior here needs the capability `/dms/deployment`. By default a node opens it to
 * every node of its network (`deployment.open`); with `deployment.open: false` only holders of
 * a `/dms/deployment` grant may deploy here. `wanted` is open either way (see it below).
 */
import { z } from 'zod';
import { MAX_NEAR_RTT_MS, PartNameSchema } from '../ensembles/schema.js';
import { JobIdSchema, LogsPayload } from './jobs.js';
import { type Job, JobSpecFields, JobStatusSchema, LabelsSchema, LocationSchema, PeerIdSchema, PlacementSchema, processSpaceIssues, RESOURCE_FLOOR, ResourceRequestSchema, ResourceSpecSchema } from './schema.js';

export const DEPLOYMENT_INBOX = 'deployment';
/** Where bid requests are published. */
export const DEPLOYMENT_TOPIC = '/dms/deployment';
export const DEPLOYMENT_CAPABILITY = '/dms/deployment';
/**
 * What the node's own actors say to each other about deployments (the orchestrator asking for a
 * placement, the deployment actor handing over a job to run): outside `/dms/job` and
 * `/dms/deployment`, so neither a REST role nor the open deployment policy reaches it.
 */
export const DEPLOYMENT_INTERNAL_CAPABILITY = '/dms/internal/deployment';

export const DeploymentBehaviors = {
  /** Would you run this job? Answered with a bid or a decline (topic `/dms/deployment`, or direct). */
  bid: '/dms/deployment/bid',
  /** Hold the job's resources for a while: phase one. */
  reserve: '/dms/deployment/reserve',
  /** Run the job on what you hold for it: phase two. */
  start: '/dms/deployment/start',
  /** Let go of a reservation that will not be started. */
  release: '/dms/deployment/release',
  /** A page of a job's output and its state, waiting for news: how the requester follows it. */
  logs: '/dms/deployment/logs',
  cancel: '/dms/deployment/cancel',
  /**
   * Asked of a job's requester by a node the job was placed on: whether the run there is still
   * the one the requester follows (actors/deployment/still-wanted.ts). Open to every node, even
   * with `open_deployment: false`: only the nodes the job was placed on hear anything of it.
   */
  wanted: '/dms/deployment/wanted',
  /** This node's orchestrator asks where a job should go (local only). */
  place: '/dms/deployment/place',
  /** This node's orchestrator says a job run for another node has ended (local only). */
  ended: '/dms/deployment/ended',
  /** A provider misbehaved (it ignored a cancel): it is not placed on for a while (local only). */
  exclude: '/dms/deployment/exclude',
} as const;

const jobId = z.uuid();

/** Most jobs one bid request carries: offers made at the same moment travel together. */
export const MAX_OFFERS_PER_REQUEST = 256;

/** Memory other than 0 as a container gets it: at least the engine's least. */
function atLeastContainerMemory<R extends { memory: { size: number } }>(r: R): R {
  return r.memory.size > 0 && r.memory.size < RESOURCE_FLOOR.memoryBytes ? { ...r, memory: { size: RESOURCE_FLOOR.memoryBytes } } : r;
}

/** A part of an ensemble that must run close to another part's node: the round trip to it at most this. */
export const NearNodeSchema = z.strictObject({
  node: PeerIdSchema,
  max_rtt_ms: z.number().positive().max(MAX_NEAR_RTT_MS),
});
export type NearNode = z.output<typeof NearNodeSchema>;

/** What a job needs of a node (memory as its lease would hold it). */
export const JobOffer = z.strictObject({
  job_id: jobId,
  resources: ResourceRequestSchema.transform(atLeastContainerMemory),
  executor: z.string().min(1).max(64),
  location: LocationSchema.optional(),
  labels: LabelsSchema.optional(),
  near: NearNodeSchema.optional(),
});
export type JobOffer = z.output<typeof JobOffer>;

/** The bid request: the jobs offered at one moment. */
export const BidRequest = z.strictObject({ jobs: z.array(JobOffer).min(1).max(MAX_OFFERS_PER_REQUEST) });
export type BidRequest = z.output<typeof BidRequest>;

export const Bid = z.object({
  job_id: jobId,
  /** What the node has free now, which the job fits in. */
  free: ResourceSpecSchema,
  /**
   * Share of the node's offered cores or memory (the larger) held: 0 idle, 1 full. Counted as
   * if the node also took the jobs it bid for earlier in the same request, so the jobs of one
   * request spread by load instead of all going to the first idle node to answer.
   */
  load: z.number().min(0).max(1),
  executors: z.array(z.string().max(64)).max(64),
  /** The bidder's round trip to the offer's `near` node, in ms (0: it is that node). */
  rtt_ms: z.number().min(0).max(60_000).optional(),
});
export type Bid = z.output<typeof Bid>;

export const Decline = z.object({
  job_id: jobId,
  /** Why this node will not run it (e.g. "needs 3 GiB of memory; its free share has at most 1 GiB"). */
  declined: z.string().max(500),
});
export type Decline = z.output<typeof Decline>;

export const BidAnswer = z.union([Bid, Decline]);
export type BidAnswer = z.output<typeof BidAnswer>;

/** One node's answers, one per job offered. */
export const BidReply = z.object({
  node: PeerIdSchema,
  answers: z.array(BidAnswer).max(MAX_OFFERS_PER_REQUEST),
});
export type BidReply = z.output<typeof BidReply>;

/** The longest lease anyone may ask for; a provider grants at most its own `deployment.lease_ms`. */
export const MAX_LEASE_MS = 60_000;

/**
 * What a lease holds: a job's share, never none of cores or memory (an executor given 0 sets no
 * limit), and at least the memory a container is given (the engine's least), so what the job
 * runs with is what the provider's ledger counts.
 */
const LeaseResources = ResourceRequestSchema.refine((r) => r.cpu.cores > 0 && r.memory.size > 0, {
  error: `a lease holds cores (at least ${RESOURCE_FLOOR.cores}) and memory: neither may be 0`,
}).transform(atLeastContainerMemory);

/** The job as the requester stored it: what the provider needs to run it. */
export const DeployedJob = JobSpecFields.omit({ placement: true }).extend({
  id: jobId,
  /** A part of an ensemble (README "Ensembles"): which, so the provider gives it the other parts' names. */
  ensemble: z.strictObject({ id: z.uuid(), part: PartNameSchema }).optional(),
}).superRefine(processSpaceIssues);
export type DeployedJob = z.input<typeof DeployedJob>;

/** What a provider is sent of a stored job to run it: its spec, the secrets' values only when it has any. */
export function deployedJobOf(job: Job): DeployedJob {
  const { id, name, image, command, environment, secrets, resources, executor, timeout_s, outputs, inputs, ports, ensemble, part } = job;
  return {
    id, name, image, command, environment, ...(Object.keys(secrets).length > 0 ? { secrets } : {}), resources, executor, ...(timeout_s ? { timeout_s } : {}),
    ...(outputs.length ? { outputs: outputs.map((o) => ({ name: o.name, path: o.path })) } : {}),
    ...(inputs.length ? { inputs } : {}),
    ...(ports.length ? { ports } : {}),
    ...(ensemble && part ? { ensemble: { id: ensemble, part } } : {}),
  };
}

export const ReserveRequest = z
  .strictObject({
    job_id: jobId,
    resources: LeaseResources,
    lease_ms: z.int().min(100).max(MAX_LEASE_MS),
    /**
     * The ensemble this lease is a part of: a requester's leases of one ensemble count as one
     * (its first lease is exempt from deployment.lease_share, and so is its first ensemble).
     */
    group: z.uuid().optional(),
    /**
     * Start this job on the lease at once, as a StartRequest would: phase two in the same round
     * trip. Not with `group`: an ensemble starts its parts only once every part is reserved.
     */
    start: DeployedJob.optional(),
  })
  .refine((r) => !r.start || r.start.id === r.job_id, { error: 'start.id must be the job_id being reserved', path: ['start', 'id'] })
  .refine((r) => !r.start || !r.group, { error: 'a lease of an ensemble (group) is started once every part is reserved, never with its reserve', path: ['start'] });

export const ReserveReply = z.object({
  until: z.iso.datetime({ offset: true }),
  /** The reserve carried a start, and the job runs here now. */
  started: z.literal(true).optional(),
  /** The reserve carried a start that was refused, as a StartRequest's error would say; the lease is let go. */
  start_refused: z.string().max(1000).optional(),
});
export type ReserveReply = z.output<typeof ReserveReply>;
/** What a reserve that carried a start says of it: running there, refused there, or neither (start it as a second step). */
export type StartOutcome = Pick<ReserveReply, 'started' | 'start_refused'>;

/** The start outcome a reply (a reserve's, a placement's) carries; null when it says nothing of a start. */
export function startOutcomeOf(reply: StartOutcome): StartOutcome | null {
  if (reply.started) return { started: true };
  if (reply.start_refused) return { start_refused: reply.start_refused };
  return null;
}

export const StartRequest = z.strictObject({ job: DeployedJob });
/** What the deployment actor hands this node's orchestrator on start (/dms/job/accept). */
export const AcceptPayload = z.strictObject({ job: DeployedJob, requester: PeerIdSchema });
export const StartReply = z.object({ job_id: jobId });

export const ReleaseRequest = z.strictObject({ job_id: jobId });
export const DeploymentLogsRequest = LogsPayload;
export const DeploymentCancelRequest = z.strictObject({
  id: JobIdSchema,
  reason: z.string().min(1).max(500).optional(),
  /**
   * How long ago, by the requester's clock, it gave the run up: a cancel asked again until the
   * provider answers may come after the job was placed there again, and stops only a run whose
   * record there is older than that (an age, so no two nodes' clocks are compared).
   */
  given_up_ms: z.int().min(0).max(7 * 24 * 3600_000).optional(),
});

export const PlaceRequest = z.strictObject({
  job_id: jobId,
  resources: ResourceSpecSchema,
  executor: z.string().min(1).max(64),
  placement: PlacementSchema.nullable(),
  /** Nodes that failed this job already: not asked again. */
  exclude: z.array(z.string()).max(64).default([]),
  /** The job has secrets: only providers this node trusts (`placement.trust`) may take it. */
  secrets: z.boolean().default(false),
  /** A part of an ensemble that must run close to another part's node. */
  near: NearNodeSchema.optional(),
  /**
   * Only ask: the best bidder is answered without a lease. An ensemble asks for every part this
   * way before it reserves any, so a part nobody can hold costs no lease let go unstarted (which
   * providers count against a requester).
   */
  probe: z.boolean().default(false),
  /**
   * The node a probe of this job just chose (it bid, and the bid passed every check here):
   * reserve there at once, without offering again; the provider still takes it only against
   * that bid (its bid book) and its room now. Refused there, the job is offered as usual.
   */
  probed: PeerIdSchema.optional(),
  /** The ensemble the job is a part of: its leases are reserved as one (ReserveRequest.group). */
  group: z.uuid().optional(),
  /** The job itself, to start with its reserve (ReserveRequest.start); never with `probe` or `group`. */
  start: DeployedJob.optional(),
});
export type PlaceRequest = z.input<typeof PlaceRequest>;

export const PlaceReply = z.union([
  /**
   * Reserved there (a lease), or this node itself (nothing reserved: the local scheduler
   * reserves). With PlaceRequest.start: `started` when it runs there already, `start_refused`
   * when the provider leased but would not start it; neither when it is to be started as usual.
   */
  z.object({ node: PeerIdSchema, started: z.literal(true).optional(), start_refused: z.string().optional() }),
  /**
   * Nobody can hold it now, and why. `only_avoided`: the only bids came from nodes the request
   * excluded (they failed this job before), so excluding them is all that keeps it waiting.
   */
  z.object({ waiting: z.string(), only_avoided: z.literal(true).optional() }),
]);
export type PlaceReply = z.output<typeof PlaceReply>;

export const EndedRequest = z.strictObject({ job_id: jobId });
export const ExcludeRequest = z.strictObject({ node: PeerIdSchema, reason: z.string().min(1).max(500) });

export const WantedRequest = z.strictObject({ job_id: jobId });
/**
 * The requester's word on the run the asking node holds: `following` (it is the run this node
 * follows), `ended` (the job ended here: `status` says how), `elsewhere` (placed on another node,
 * or being placed again), `unknown` (no such job here, or never placed on the asker). An answer,
 * never an error: a node without this behavior answers not_found, which must not stop a run.
 */
export const WANTED_ANSWERS = ['following', 'ended', 'elsewhere', 'unknown'] as const;
export const WantedReply = z.object({ job_id: jobId, answer: z.enum(WANTED_ANSWERS), status: JobStatusSchema.optional() });
export type WantedReply = z.output<typeof WantedReply>;
