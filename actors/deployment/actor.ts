/**
 * The deployment actor (inbox `deployment`, topic `/dms/deployment`): places jobs on the
 * network for this node's orchestrator, and takes jobs other nodes place here.
 *
 * As requester it runs one `placement` machine per job (./placement-machine.ts): offer, collect
 * bids for a short adaptive window, rank them, reserve on the best bidder (phase one). The
 * orchestrator then starts the job there (phase two) through the remote executor.
 *
 * As provider it answers bids from what the resource manager says is free, holds a lease for a
 * job a requester reserves (one `deployment` machine per job, ./provider-machine.ts), and on
 * start hands the job to this node's orchestrator, which runs it as one of its own with its
 * `requester` recorded. Only that requester may read the job's output or cancel it.
 *
 * Other actors are reached by envelopes only: the resource manager, the orchestrator, and the
 * deployment actors of other nodes.
 */
import { performance } from 'node:perf_hooks';
import type { z } from 'zod';
import { type EventObject, fromCallback, fromPromise, toPromise } from 'xstate';
import {
  type BidAnswer,
  BidReply,
  BidRequest,
  type JobOffer,
  MAX_OFFERS_PER_REQUEST,
  DEPLOYMENT_CAPABILITY,
  DEPLOYMENT_INTERNAL_CAPABILITY,
  DEPLOYMENT_INBOX,
  DEPLOYMENT_TOPIC,
  DeploymentBehaviors,
  DeploymentCancelRequest,
  DeploymentLogsRequest,
  EndedRequest,
  PlaceRequest,
  type PlaceReply,
  ReleaseRequest,
  ReserveReply,
  ReserveRequest,
  StartRequest,
} from '../../behaviors/jobs/deployment.js';
import { JobBehaviors, LogsReply, ORCHESTRATOR_INBOX } from '../../behaviors/jobs/jobs.js';
import { callBehavior, handleAt, localHandle, replyWhenDone } from '../../behaviors/jobs/replies.js';
import { LeaseReply, loadOf, type Offer, OfferReply, ReleaseReply, ResourceBehaviors, RESOURCES_INBOX } from '../../behaviors/jobs/resources.js';
import { JobSchema, type Labels, type Location, type ResourceSpec } from '../../behaviors/jobs/schema.js';
import type { Actor } from '../../runtime/actor.js';
import { defineBehavior } from '../../runtime/behavior.js';
import { type ActorContext, defineActor } from '../../runtime/component.js';
import { DmsError, errorText, notFound } from '../../runtime/errors.js';
import { ownKeys } from '../../runtime/capability/authority.js';
import { decodePayload, type Envelope, type Handle } from '../../runtime/wire/envelope.js';
import { lacks } from '../orchestrator/placement.js';
import { type OfferEvent, placementMachine, type PlacementInput } from './placement-machine.js';
import { providerMachine } from './provider-machine.js';

export interface DeploymentDeps {
  /** Executors this node runs jobs with: what its bids offer. */
  executors: readonly string[];
  /** The peers connected now (the libp2p transport); absent without a network. */
  network?: { peers(): string[] };
}

/** How long a reservation is held for the start that should follow at once. */
export const LEASE_MS = 10_000;
/** Longest the requester collects bids; a quiet network answers in far less (see offer). */
const MAX_WINDOW_MS = 500;
/** Shortest window once a first bid came: the others come about as fast. */
const MIN_WINDOW_MS = 25;
/** Bytes of bids one offer collects at most. */
const MAX_BID_BYTES = 1024 * 1024;
/** How long a node that refused to reserve is asked only when nobody else bid. */
const SUSPECT_MS = 30_000;
/** Reservations one requester may hold here at once, and all requesters together. */
const MAX_LEASES_PER_REQUESTER = 64;
const MAX_DEPLOYMENTS = 4096;
/** A local hop, or one to a peer: answered at once unless it is gone. */
const CALL_TTL_MS = 5_000;

export const DeploymentActor = defineActor({
  inbox: DEPLOYMENT_INBOX,
  topics: [DEPLOYMENT_TOPIC],
  // Every handler waits on other actors (the resource manager, the orchestrator, peers) and
  // its state (the machines) changes only between awaits: many placements at once are what a
  // busy requester needs.
  concurrency: 'node',
  create: (ctx: ActorContext<DeploymentDeps>) => {
    const deployment = new Deployment(ctx);
    return { behaviors: deployment.behaviors(), stop: () => deployment.stop() };
  },
});

type ProviderActor = ReturnType<typeof startProvider>;

function startProvider(ctx: ActorContext<DeploymentDeps>, jobId: string, requester: string, leaseMs: number) {
  const machine = ctx.machine(providerMachine, { id: jobId, input: { jobId, requester, leaseMs } });
  machine.start();
  return machine;
}

class Deployment {
  private readonly actor: Actor;
  /** Jobs other nodes reserved or run here, by job id; gone once released. */
  private readonly provided = new Map<string, ProviderActor>();
  /** Nodes that refused to reserve lately, with when. */
  private readonly suspect = new Map<string, number>();
  private readonly machine: typeof placementMachine;
  /** Offers made in this turn of the event loop, published together at its end. */
  private batch: OfferBatch | null = null;
  /** Whether a key id is one of this node's own. */
  private readonly own: (id: string) => boolean;

  constructor(private readonly ctx: ActorContext<DeploymentDeps>) {
    this.actor = ctx.actor;
    this.own = ownKeys(ctx.system);
    this.machine = placementMachine.provide({
      actors: {
        offer: fromCallback<EventObject, PlacementInput>(({ input, sendBack }) => this.offer(input, sendBack as (e: OfferEvent) => void)),
        reserve: fromPromise(async ({ input }: { input: { node: string; jobId: string; resources: ResourceSpec } }) => {
          try {
            await callBehavior(this.actor, this.deploymentOf(input.node), DeploymentBehaviors.reserve, { job_id: input.jobId, resources: input.resources, lease_ms: LEASE_MS }, ReserveReply, { ttlMs: CALL_TTL_MS });
          } catch (e) {
            this.suspect.set(input.node, Date.now());
            throw e;
          }
        }),
      },
    });
  }

  stop(): void {
    for (const m of this.provided.values()) m.stop();
    this.provided.clear();
  }

  behaviors() {
    return [
      defineBehavior({ name: DeploymentBehaviors.bid, payload: BidRequest, capability: DEPLOYMENT_CAPABILITY, handle: ({ env, payload }) => this.bid(env, payload) }),
      defineBehavior({ name: DeploymentBehaviors.reserve, payload: ReserveRequest, capability: DEPLOYMENT_CAPABILITY, handle: ({ env, payload }) => this.reserve(env, payload) }),
      defineBehavior({ name: DeploymentBehaviors.start, payload: StartRequest, capability: DEPLOYMENT_CAPABILITY, handle: ({ env, payload }) => this.start(env, payload) }),
      defineBehavior({ name: DeploymentBehaviors.release, payload: ReleaseRequest, capability: DEPLOYMENT_CAPABILITY, handle: ({ env, payload }) => this.release(env, payload.job_id) }),
      defineBehavior({
        name: DeploymentBehaviors.logs,
        payload: DeploymentLogsRequest,
        capability: DEPLOYMENT_CAPABILITY,
        noReply: true,
        handle: (c) =>
          replyWhenDone(c, async () => {
            await this.requesterOnly(c.env, c.payload.id);
            return callBehavior(this.actor, this.orchestrator(), JobBehaviors.logs, c.payload, LogsReply, { ttlMs: c.payload.wait_ms + CALL_TTL_MS });
          }),
      }),
      defineBehavior({
        name: DeploymentBehaviors.cancel,
        payload: DeploymentCancelRequest,
        capability: DEPLOYMENT_CAPABILITY,
        noReply: true,
        handle: (c) =>
          replyWhenDone(c, async () => {
            await this.requesterOnly(c.env, c.payload.id);
            // A stop takes the engine's grace period and more.
            return callBehavior(this.actor, this.orchestrator(), JobBehaviors.cancel, c.payload, JobSchema, { ttlMs: 600_000 });
          }),
      }),
      // This node's own: the orchestrator asks where a job goes, and says when a provided one ended.
      defineBehavior({
        name: DeploymentBehaviors.place,
        payload: PlaceRequest,
        capability: DEPLOYMENT_INTERNAL_CAPABILITY,
        noReply: true,
        handle: (c) => replyWhenDone(c, () => this.place(c.payload)),
      }),
      defineBehavior({
        name: DeploymentBehaviors.ended,
        payload: EndedRequest,
        capability: DEPLOYMENT_INTERNAL_CAPABILITY,
        handle: ({ payload }) => {
          this.provided.get(payload.job_id)?.send({ type: 'ended' });
          this.provided.delete(payload.job_id);
        },
      }),
    ];
  }

  // --- requester -------------------------------------------------------------------------

  private async place(p: z.output<typeof PlaceRequest>): Promise<PlaceReply> {
    const now = Date.now();
    for (const [node, at] of this.suspect) if (now - at > SUSPECT_MS) this.suspect.delete(node);
    const pinned = p.placement?.node;
    const expected = pinned ? 1 : (this.ctx.deps.network?.peers().length ?? 0) + 1;
    const input = {
      jobId: p.job_id,
      resources: p.resources,
      executor: p.executor,
      placement: p.placement,
      exclude: p.exclude,
      self: this.actor.system.host,
      suspect: new Set(this.suspect.keys()),
      expected,
    };
    const run = this.ctx.machine(this.machine, { id: p.job_id, input });
    run.start();
    return toPromise(run);
  }

  /**
   * Offers the job and passes each answer to the machine. Pinned: asks that node alone.
   * Otherwise the offer joins this moment's batch (see flushOffers).
   */
  private offer(input: PlacementInput, sendBack: (e: OfferEvent) => void): () => void {
    const job: JobOffer = {
      job_id: input.jobId,
      resources: input.resources,
      executor: input.executor,
      ...(input.placement?.location ? { location: input.placement.location } : {}),
      ...(input.placement?.labels ? { labels: input.placement.labels } : {}),
    };
    const pinned = input.placement?.node;
    if (pinned) {
      let stopped = false;
      sendBack({ type: 'offered' });
      callBehavior(this.actor, this.deploymentOf(pinned), DeploymentBehaviors.bid, { jobs: [job] }, BidReply, { ttlMs: CALL_TTL_MS }).then(
        (reply) => {
          const answer = reply.node === pinned ? reply.answers.find((a) => a.job_id === job.job_id) : undefined;
          if (stopped) return;
          if (answer) sendBack({ type: 'bid', node: reply.node, answer });
          else sendBack({ type: 'offer_failed', reason: `node ${pinned} gave no answer about the job` });
        },
        (e: unknown) => !stopped && sendBack({ type: 'offer_failed', reason: `node ${pinned} is unreachable: ${errorText(e)}` }),
      );
      return () => (stopped = true);
    }
    let batch = this.batch;
    if (!batch) {
      batch = this.batch = { jobs: [], listeners: new Map(), ac: new AbortController() };
      setImmediate(() => this.flushOffers(batch!));
    }
    batch.jobs.push(job);
    batch.listeners.set(job.job_id, sendBack);
    if (batch.jobs.length >= MAX_OFFERS_PER_REQUEST) this.flushOffers(batch);
    sendBack({ type: 'offered' });
    const mine = batch;
    return () => {
      mine.listeners.delete(job.job_id);
      // Every machine of the batch has what it needs: the rest of the answers are not waited for.
      if (mine.listeners.size === 0 && this.batch !== mine) mine.ac.abort();
    };
  }

  /**
   * Publishes the offers made at one moment in one bid request on the topic, and hands each
   * answer to its job's machine. The window closes when every node that could answer has, or
   * twice the first remote answer's delay after the offer (at least MIN_WINDOW_MS), or at
   * MAX_WINDOW_MS.
   */
  private flushOffers(batch: OfferBatch): void {
    if (this.batch !== batch) return;
    this.batch = null;
    const began = performance.now();
    let window: NodeJS.Timeout | undefined;
    const tell = (e: OfferEvent) => {
      for (const listener of batch.listeners.values()) listener(e);
    };
    const close = () => {
      clearTimeout(window);
      if (!batch.ac.signal.aborted) tell({ type: 'window_closed' });
    };
    this.actor
      .gather(DEPLOYMENT_TOPIC, DeploymentBehaviors.bid, { jobs: batch.jobs }, {
        windowMs: MAX_WINDOW_MS,
        max: 1024,
        maxBytes: MAX_BID_BYTES,
        signal: batch.ac.signal,
        enough: (replies) => {
          const last = replies[replies.length - 1];
          const reply = bidsOf(last);
          if (reply) {
            for (const answer of reply.answers) batch.listeners.get(answer.job_id)?.({ type: 'bid', node: reply.node, answer });
          }
          // Timed from the first answer across the network: this node's own comes at once.
          if (!this.actor.system.isHere(last.from.addr.host)) {
            window ??= setTimeout(close, Math.min(MAX_WINDOW_MS, Math.max(MIN_WINDOW_MS, 2 * (performance.now() - began))));
          }
          return false;
        },
      })
      .then(close, (e: unknown) => !batch.ac.signal.aborted && tell({ type: 'offer_failed', reason: `the offer could not be sent: ${errorText(e)}` }));
  }

  private deploymentOf(node: string): Handle {
    return this.actor.system.isHere(node) ? localHandle(this.actor, DEPLOYMENT_INBOX) : handleAt(node, DEPLOYMENT_INBOX);
  }

  // --- provider --------------------------------------------------------------------------

  /**
   * The node that asked: proven by the kernel for envelopes from the network (the sending
   * peer). A request naming this node must come from this node's own actors: anyone else
   * reaching the deployment behaviors through REST (whose envelopes name this node) would
   * otherwise deploy here as the node itself, past its share and the caller's REST role.
   */
  private requesterOf(env: Envelope): string {
    const host = env.from.addr.host || this.actor.system.host;
    if (this.actor.system.isHere(host) && !this.own(env.from.id)) {
      throw new DmsError('forbidden', 'deployment requests naming this node come from its own actors only; submit jobs with /dms/job/submit');
    }
    return host;
  }

  private async bid(env: Envelope, { jobs }: BidRequest): Promise<BidReply> {
    const requester = this.requesterOf(env);
    const executors = this.ctx.deps.executors;
    const offer = await callBehavior(this.actor, this.manager(), ResourceBehaviors.offer, {}, OfferReply, { ttlMs: CALL_TTL_MS });
    // What the jobs bid for so far in this request would hold here (see Bid.load).
    const taken = { cores: 0, memory: 0 };
    const answers = jobs.map((job): BidAnswer => {
      const declined = (why: string): BidAnswer => ({ job_id: job.job_id, declined: why });
      if (!this.actor.system.isHere(requester) && !offer.offered) return declined('offers nothing to the network (no onboarded share)');
      if (!executors.includes(job.executor)) return declined(`has no executor "${job.executor}" (has ${executors.join(', ')})`);
      const mismatch = locationMismatch(job.location, offer.location) ?? labelMismatch(job.labels, offer.labels);
      if (mismatch) return declined(mismatch);
      // Each job against the whole free share: a bid is an offer, the reservation decides.
      const short = lacks(job.resources, { label: 'its free share', capacity: offer.free });
      if (short) return declined(short);
      const load = loadWith(offer, taken);
      taken.cores += job.resources.cpu.cores;
      taken.memory += job.resources.memory.size;
      return { job_id: job.job_id, free: offer.free, load, executors: [...executors] };
    });
    return { node: this.actor.system.host, answers };
  }

  private async reserve(env: Envelope, req: { job_id: string; resources: ResourceSpec; lease_ms: number }): Promise<{ until: string }> {
    const requester = this.requesterOf(env);
    const here = this.actor.system.isHere(requester);
    const known = this.provided.get(req.job_id);
    if (known && known.getSnapshot().context.requester !== requester) throw new DmsError('conflict', `job ${req.job_id} is reserved here by another node`);
    if (known && known.getSnapshot().value !== 'reserved') throw new DmsError('conflict', `job ${req.job_id} already runs here`);
    if (!known) {
      if (this.provided.size >= MAX_DEPLOYMENTS) throw new DmsError('overloaded', 'this node holds as many deployments as it takes', { retryAfter: 5 });
      let mine = 0;
      for (const m of this.provided.values()) if (m.getSnapshot().context.requester === requester && m.getSnapshot().value === 'reserved') mine++;
      if (mine >= MAX_LEASES_PER_REQUESTER) throw new DmsError('overloaded', `your node holds ${mine} reservations here not yet started`, { retryAfter: 5 });
      if (!here) {
        const offer = await callBehavior(this.actor, this.manager(), ResourceBehaviors.offer, {}, OfferReply, { ttlMs: CALL_TTL_MS });
        if (!offer.offered) throw new DmsError('forbidden', 'this node offers nothing to the network (no onboarded share)');
      }
    }
    const lease = await callBehavior(this.actor, this.manager(), ResourceBehaviors.lease, { job_id: req.job_id, resources: req.resources, ttl_ms: req.lease_ms }, LeaseReply, {
      ttlMs: CALL_TTL_MS,
    });
    known?.stop();
    const machine = startProvider(this.ctx, req.job_id, requester, req.lease_ms);
    this.provided.set(req.job_id, machine);
    machine.subscribe((s) => {
      if (s.status === 'done' && this.provided.get(req.job_id) === machine) this.provided.delete(req.job_id);
    });
    return lease;
  }

  private async start(env: Envelope, { job }: { job: { id: string } & Record<string, unknown> }): Promise<{ job_id: string }> {
    const requester = this.requesterOf(env);
    const machine = this.provided.get(job.id);
    const snap = machine?.getSnapshot();
    if (!machine || snap!.context.requester !== requester || snap!.value !== 'reserved') {
      throw new DmsError('conflict', `job ${job.id} holds no reservation of yours here (the lease may have run out)`);
    }
    await callBehavior(this.actor, this.orchestrator(), JobBehaviors.accept, { job, requester }, JobSchema, { ttlMs: CALL_TTL_MS });
    machine.send({ type: 'start' });
    return { job_id: job.id };
  }

  private async release(env: Envelope, jobId: string): Promise<Record<string, never>> {
    const machine = this.provided.get(jobId);
    const snap = machine?.getSnapshot();
    if (!machine || snap!.context.requester !== this.requesterOf(env) || snap!.value !== 'reserved') return {};
    await callBehavior(this.actor, this.manager(), ResourceBehaviors.release, { job_ids: [jobId] }, ReleaseReply, { ttlMs: CALL_TTL_MS });
    machine.send({ type: 'release' });
    return {};
  }

  /** Only the node that placed a job here may follow or stop it; to anyone else it does not exist. */
  private async requesterOnly(env: Envelope, jobId: string): Promise<void> {
    // Running now: its deployment knows who asked. Otherwise (ended, or this node restarted) the record says.
    const running = this.provided.get(jobId)?.getSnapshot();
    if (running?.value === 'running' && running.context.requester === this.requesterOf(env)) return;
    const job = await callBehavior(this.actor, this.orchestrator(), JobBehaviors.status, { id: jobId }, JobSchema, { ttlMs: CALL_TTL_MS }).catch((e: unknown) => {
      if (e instanceof DmsError && e.kind === 'not_found') return null;
      throw e;
    });
    if (!job || job.requester === null || job.requester !== this.requesterOf(env)) throw notFound(`job ${jobId} not found`);
  }

  private manager(): Handle {
    return localHandle(this.actor, RESOURCES_INBOX);
  }

  private orchestrator(): Handle {
    return localHandle(this.actor, ORCHESTRATOR_INBOX);
  }
}

/** The load a node's offer would show with `taken` more held: its own figure while nothing more is. */
function loadWith(offer: Offer, taken: { cores: number; memory: number }): number {
  if (taken.cores === 0 && taken.memory === 0) return offer.load;
  const { offering, free } = offer;
  const held = { cores: offering.cpu.cores - free.cpu.cores + taken.cores, memory: offering.memory.size - free.memory.size + taken.memory };
  return Math.max(offer.load, loadOf(held, offering));
}

/** A node's answers out of a reply envelope; anything else (an error reply, a malformed bid) is no answer. */
function bidsOf(env: Envelope | undefined): BidReply | null {
  if (!env) return null;
  try {
    const parsed = BidReply.safeParse(decodePayload(env.msg));
    // A node speaks for itself only: the kernel proved who sent it.
    return parsed.success && (env.from.addr.host === '' || parsed.data.node === env.from.addr.host) ? parsed.data : null;
  } catch {
    return null;
  }
}

/** The offers of one moment, waiting for their answers together. */
interface OfferBatch {
  jobs: JobOffer[];
  /** Each job's machine, by job id; gone once it stopped listening. */
  listeners: Map<string, (e: OfferEvent) => void>;
  ac: AbortController;
}

function locationMismatch(want: Location | undefined, has: Location): string | null {
  if (!want) return null;
  for (const key of ['region', 'country', 'city'] as const) {
    const asked = want[key];
    if (asked !== undefined && asked.toLowerCase() !== (has[key] ?? '').toLowerCase()) {
      return `is not in ${key} ${asked} (${has[key] ? `it is in ${has[key]}` : `its ${key} is not set`})`;
    }
  }
  return null;
}

function labelMismatch(want: Labels | undefined, has: Labels): string | null {
  if (!want) return null;
  for (const [key, value] of Object.entries(want)) {
    if (has[key] !== value) return `lacks label ${key}=${value}${has[key] !== undefined ? ` (has ${key}=${has[key]})` : ''}`;
  }
  return null;
}
