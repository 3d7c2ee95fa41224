/**
 * Ensembles (README "Ensembles"): several named parts, each a job, placed all or nothing and
 * reaching each other as `<part>.internal:<port>` wherever they run. The shapes are declared
 * once here: REST and the CLI validate with them, storage and the actors use their types.
 */
import { z } from 'zod';
import { JobSpecFields, JobSpecSchema, PeerIdSchema, processSpaceIssues } from '../jobs/schema.js';

/** The most parts one ensemble may have: each is a job, a lease and a set of names on every node hosting a part. */
export const MAX_PARTS = 16;
/** The farthest a `near` constraint may reach: beyond a second nothing is near. */
export const MAX_NEAR_RTT_MS = 1_000;

/**
 * Names a part may not take: they already mean something inside a container or to Docker
 * (`localhost`, `host.docker.internal`'s `host`, `gateway`), or would shadow the suffix itself;
 * and `constructor`, the one property every JavaScript object has whose name is a DNS label:
 * looked up by part name, it was found where no part was (a part so named lost its restarts).
 */
export const RESERVED_PART_NAMES = ['localhost', 'host', 'gateway', 'internal', 'docker', 'dms', 'local', 'broadcasthost', 'constructor'] as const;

/** A part's name: a DNS label (RFC 1123: lower-case letters, digits and -, at most 63), so `<part>.internal` resolves. */
export const PartNameSchema = z
  .string()
  .regex(/^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$/, 'part names are DNS labels: lower-case letters, digits and -, not starting or ending with -, at most 63')
  .refine((name) => !(RESERVED_PART_NAMES as readonly string[]).includes(name), {
    error: (issue) => `part name '${String(issue.input)}' is reserved (reserved: ${RESERVED_PART_NAMES.join(', ')})`,
  });

export const PART_KINDS = ['task', 'service'] as const;

/** What is done when a part's run fails: `failure` starts it again (at most `max` times), `never` lets it fail. */
export const RestartSchema = z.strictObject({
  on: z.enum(['failure', 'never']).default('never'),
  max: z.int().min(0).max(10).default(3),
});
export type Restart = z.output<typeof RestartSchema>;

export const NearSchema = z.strictObject({
  /** The other part this one must run close to. */
  part: PartNameSchema,
  /** The most round-trip time (libp2p ping) between this part's node and that part's node. */
  max_rtt_ms: z.number().positive().max(MAX_NEAR_RTT_MS),
});
export type Near = z.output<typeof NearSchema>;

/** A part: a job spec (its name may be left out: `<ensemble>.<part>`), plus how it lives in the ensemble. */
export const PartSpecSchema = JobSpecFields.extend({
  name: z.string().min(1).max(200).optional(),
  /** `task`: the ensemble completes when every task completed. `service`: runs until then, and is stopped. */
  kind: z.enum(PART_KINDS).default('task'),
  restart: RestartSchema.default({ on: 'never', max: 3 }),
  /** Its failure does not fail the ensemble. */
  optional: z.boolean().default(false),
  near: NearSchema.optional(),
}).superRefine(processSpaceIssues);
export type PartSpec = z.output<typeof PartSpecSchema>;

/** What POST /api/v1/ensembles accepts. */
export const EnsembleSpecSchema = z
  .strictObject({
    name: z.string().min(1).max(200),
    // How often a part may be placed again when its node is lost is its own placement.max_attempts.
    parts: z.record(PartNameSchema, PartSpecSchema),
  })
  .superRefine((spec, ctx) => {
    const names = Object.keys(spec.parts);
    if (names.length === 0) ctx.addIssue({ code: 'custom', message: 'an ensemble has at least one part', path: ['parts'] });
    if (names.length > MAX_PARTS) ctx.addIssue({ code: 'custom', message: `at most ${MAX_PARTS} parts (this one has ${names.length})`, path: ['parts'] });
    for (const [name, part] of Object.entries(spec.parts)) {
      if (part.placement?.local) ctx.addIssue({ code: 'custom', message: 'placement.local is not for a part: the ensemble decides where its parts run (pin one with placement.node)', path: ['parts', name, 'placement', 'local'] });
      if (!part.near) continue;
      if (part.near.part === name) ctx.addIssue({ code: 'custom', message: `part ${name} cannot be near itself`, path: ['parts', name, 'near', 'part'] });
      else if (!Object.hasOwn(spec.parts, part.near.part)) ctx.addIssue({ code: 'custom', message: `part ${name} is near '${part.near.part}', which is not a part of this ensemble (parts: ${names.join(', ')})`, path: ['parts', name, 'near', 'part'] });
    }
    const cycle = nearCycle(spec.parts);
    if (cycle) ctx.addIssue({ code: 'custom', message: `near constraints form a cycle (${cycle.join(' -> ')}): one part of it must be placed first`, path: ['parts', cycle[0]!, 'near'] });
  });
export type EnsembleSpecInput = z.input<typeof EnsembleSpecSchema>;
export type EnsembleSpec = z.output<typeof EnsembleSpecSchema>;

/** The first cycle among `near` links, as the parts on it (first repeated at the end), or null. */
export function nearCycle(parts: Record<string, { near?: { part: string } }>): string[] | null {
  for (const start of Object.keys(parts)) {
    const seen: string[] = [];
    let at: string | undefined = start;
    while (at !== undefined && parts[at]) {
      const i = seen.indexOf(at);
      if (i >= 0) return [...seen.slice(i), at];
      seen.push(at);
      at = parts[at]!.near?.part;
    }
  }
  return null;
}

/** Parts in an order where each comes after the part it must be near: the order they are placed in. */
export function placementOrder(parts: Record<string, { near?: { part: string } }>): string[] {
  const order: string[] = [];
  const visit = (name: string, depth: number) => {
    if (order.includes(name) || depth > MAX_PARTS) return;
    const near = parts[name]?.near?.part;
    if (near && parts[near]) visit(near, depth + 1);
    order.push(name);
  };
  for (const name of Object.keys(parts).sort()) visit(name, 0);
  return order;
}

export const ENSEMBLE_STATUSES = ['pending', 'running', 'completed', 'failed'] as const;
export const EnsembleStatusSchema = z.enum(ENSEMBLE_STATUSES);
export type EnsembleStatus = z.output<typeof EnsembleStatusSchema>;

const time = z.iso.datetime({ offset: true });

/** One part as the ensemble reports it: its job, where it runs, how it stands. */
export const PartStateSchema = z.object({
  part: z.string(),
  kind: z.enum(PART_KINDS),
  job_id: z.uuid(),
  /** Peer id of the node running it; null until placed, or while placed again. */
  node: z.string().nullable(),
  status: z.enum(['pending', 'running', 'completed', 'failed']),
  ports: z.array(z.int()),
  /** Runs it was started again after a failure (`restart.on: failure`). */
  restarts: z.int().nonnegative(),
  error: z.string().nullable(),
});
export type PartState = z.output<typeof PartStateSchema>;

export const EnsembleSchema = z.object({
  id: z.uuid(),
  name: z.string(),
  status: EnsembleStatusSchema,
  /** Why it failed, or what it waits for while pending. */
  reason: z.string().nullable(),
  /** Rounds that placed parts: the first, and one for each part (or parts) placed again since. */
  attempts: z.int().nonnegative(),
  parts: z.array(PartStateSchema),
  spec: EnsembleSpecSchema,
  created_at: time,
  updated_at: time,
});
export type Ensemble = z.output<typeof EnsembleSchema>;

/**
 * Who hosts an ensemble's parts now: what the requester tells every node hosting a part (and
 * itself), so that node can give its parts the names of the others and let the other hosts'
 * tunnels in. It is the grant for the ensemble's tunnels: it holds until `expires_at` unless
 * renewed, and the requester renews it while the ensemble lives, so a grant outlives the
 * ensemble by at most that (README "Ensembles").
 */
export const EnsembleMembersSchema = z.strictObject({
  ensemble: z.uuid(),
  /** Newer replaces older; an older one arriving late is ignored. */
  version: z.int().nonnegative(),
  /** ms since the epoch; at most MAX_GRANT_MS ahead. */
  expires_at: z.int().positive(),
  parts: z
    .array(
      z.strictObject({
        part: PartNameSchema,
        job_id: z.uuid(),
        /** Where it runs or is about to; null while it has no node. */
        node: PeerIdSchema.nullable(),
        ports: z.array(z.int().min(1).max(65535)).max(16),
      }),
    )
    .min(1)
    .max(MAX_PARTS),
});
export type EnsembleMembers = z.output<typeof EnsembleMembersSchema>;

/** The longest a members grant may be given for: renewed well before, so a lost requester's grant ends soon. */
export const MAX_GRANT_MS = 120_000;
/** An ended ensemble's grant, withdrawn. */
export const EnsembleRevokeSchema = z.strictObject({ ensemble: z.uuid() });

/** The ensemble actor (inbox `ensembles`, on the node an ensemble was submitted on): its REST and CLI face. */
export const EnsembleBehaviors = {
  submit: '/dms/ensemble/submit',
  list: '/dms/ensemble/list',
  status: '/dms/ensemble/status',
  cancel: '/dms/ensemble/cancel',
} as const;

export const ENSEMBLE_INBOX = 'ensembles';
/** Submit, list, status, cancel: a REST role's or a key's, like /dms/job. */
export const ENSEMBLE_CAPABILITY = '/dms/ensemble';

/**
 * The ensemble network actor (inbox `ensemble-net`, on every node that hosts parts): keeps the
 * requesters' members grants, gives each part's container the names of the others and lets the
 * other hosts' tunnels in. `members` and `revoke` come from requesters (other nodes, under the
 * deployment capability, each requester's grants apart from the others'); `attach` and `detach`
 * from this node's executors.
 */
export const ENSEMBLE_NET_INBOX = 'ensemble-net';
export const EnsembleNetBehaviors = {
  /** A requester tells a node hosting a part who hosts the others (the tunnels' grant). */
  members: '/dms/ensemble-net/members',
  /** The ensemble ended: its grant is withdrawn at once. */
  revoke: '/dms/ensemble-net/revoke',
  /** This node's executor is about to create a part's container: the networks and names it gets. */
  attach: '/dms/ensemble-net/attach',
  /** A part's container is gone: what it alone needed goes too. */
  detach: '/dms/ensemble-net/detach',
} as const;

/**
 * What `ensemble-net` speaks under besides `members`/`revoke`: `attach` and `detach` come from
 * this node's executors only. Outside `/dms/deployment` and every REST role, like
 * `/dms/internal/deployment`, so no peer and no REST caller reaches them.
 */
export const ENSEMBLE_NET_INTERNAL_CAPABILITY = '/dms/internal/ensemble-net';

/** What a node answers a members grant with: the grant it holds for that ensemble now. */
export const EnsembleMembersReply = z.object({
  ensemble: z.uuid(),
  /** The version held: the one sent, or a newer one already there (then `accepted` is false). */
  version: z.int().nonnegative(),
  expires_at: z.int().positive(),
  accepted: z.boolean(),
});
export type EnsembleMembersReply = z.output<typeof EnsembleMembersReply>;

export const EnsembleRevokeReply = z.object({ ensemble: z.uuid(), revoked: z.boolean() });

/** The docker executor, about to create a part's container: which part of whose ensemble. */
export const EnsembleAttachSchema = z.strictObject({
  job_id: z.uuid(),
  ensemble: z.uuid(),
  part: PartNameSchema,
  /** The job's requester (its stored `requester`); null: this node's own job. */
  requester: PeerIdSchema.nullable(),
});
export type EnsembleAttach = z.output<typeof EnsembleAttachSchema>;

/** The networks the container joins (the first as its NetworkMode) and its `/etc/hosts` lines (`<part>.internal:<ip>`). */
export const EnsembleAttachReply = z.object({
  networks: z.array(z.string()).min(1),
  extra_hosts: z.array(z.string()),
});
export type EnsembleAttachReply = z.output<typeof EnsembleAttachReply>;

/** A part's container is gone (removed, or never made). */
export const EnsembleDetachSchema = z.strictObject({ job_id: z.uuid() });

/**
 * What this node's own actors say to each other about ensembles (the ensemble actor creating
 * and assigning parts, the orchestrator reporting how they stand): outside `/dms/ensemble`
 * and `/dms/deployment`, so neither a REST role nor another node reaches it.
 */
export const ENSEMBLE_INTERNAL_CAPABILITY = '/dms/internal/ensemble';

/** The orchestrator's behaviors for parts, and its report to the ensemble actor. */
export const PartBehaviors = {
  /** Create a part's job (orchestrator): validated and admitted like any job, then held for its ensemble. */
  create: '/dms/job/part',
  /** A held part goes to the node its ensemble reserved for it (orchestrator). */
  assign: '/dms/job/assign',
  /** How a part stands now (to the ensemble actor): sent on each stored change of status or node. */
  changed: '/dms/ensemble/part',
} as const;

export const PartCreatePayload = z.strictObject({
  ensemble: z.uuid(),
  part: PartNameSchema,
  job_id: z.uuid(),
  spec: JobSpecSchema,
});
export const PartAssignPayload = z.strictObject({ job_id: z.uuid(), node: PeerIdSchema });
export const PartChangedPayload = z.strictObject({
  job_id: z.uuid(),
  ensemble: z.uuid(),
  part: z.string(),
  status: z.enum(['pending', 'running', 'completed', 'failed']),
  node: z.string().nullable(),
  error: z.string().nullable(),
  /** Nodes that lost or refused it: not asked again when it is placed anew. */
  exclude: z.array(z.string()).max(64),
});
export type PartChanged = z.output<typeof PartChangedPayload>;
