/**
 * The provider's half of the deployment actor: it answers bids from what the resource manager
 * says is free, leases a share for a job it bid on to the node that offered it, and on start
 * hands the job to this node's orchestrator, which runs it on exactly that share with its
 * `requester` recorded. Whether a reserve or start is taken is decided by the job's `deployment`
 * machine (./provider-machine.ts); this class gathers what its guards need and carries out what
 * it decides.
 */
import { waitFor } from 'xstate';
import type { z } from 'zod';
import type { BidAnswer, BidReply, BidRequest, ReserveReply, ReserveRequest, StartRequest } from '../../behaviors/jobs/deployment.js';
import { JobBehaviors, ORCHESTRATOR_INBOX } from '../../behaviors/jobs/jobs.js';
import { LeaseReply, loadOf, type Offer, OfferReply, ResourceBehaviors, RESOURCES_INBOX } from '../../behaviors/jobs/resources.js';
import { type Job, JobSchema, type ResourceSpec } from '../../behaviors/jobs/schema.js';
import { volumesOf } from '../../behaviors/jobs/files.js';
import type { Actor } from '../../runtime/actor.js';
import { ownKeys } from '../../runtime/capability/authority.js';
import type { ActorContext } from '../../runtime/component.js';
import { DmsError, errorText, notFound } from '../../runtime/errors.js';
import { type Envelope, type Handle, isBroadcast } from '../../runtime/wire/envelope.js';
import { BidBook } from './bid-book.js';
import { labelMismatch, lacks, locationMismatch } from '../../behaviors/jobs/fit.js';
import { type Holding, providerMachine, type ProviderInput, type ProviderLimits } from './provider-machine.js';
import { Strikes } from './strikes.js';
import { type RoundTrip, RoundTrips } from './round-trips.js';
import { rememberNewest } from '../../runtime/bounded-map.js';
import type { StillWanted } from './still-wanted.js';

/** Deployments (leased or running for other nodes) held here at once. */
const MAX_DEPLOYMENTS = 4096;
/** Ended jobs whose requester the provider keeps in memory (a few hundred KiB at most). */
const MAX_ENDED_REMEMBERED = 4096;
/** A start this node cannot take now, though it may later: the job's run here before is still stopping, or the node is. */
const deferred = (e: unknown): boolean => e instanceof DmsError && e.kind === 'unavailable';

/** How far back a requester's bids count in the load its next bids show: one burst of its jobs. */
const BURST_MS = 1_000;
/** A local hop: answered at once unless the node is stopping. */
const CALL_TTL_MS = 5_000;
/** How long after a bid its job may be reserved: the requester's window (≤ 0.5 s) and a few refused reserves before it. */
const BID_VALID_MS = 15_000;
/** Unstarted ends within this window that bar a requester; a lease that runs out counts as all of them. */
const STRIKE_WINDOW_MS = 60_000;
const STRIKES_TO_BAR = 4;

type ProviderMachine = ReturnType<typeof startMachine>;

function startMachine(ctx: ActorContext<unknown>, logic: typeof providerMachine, input: ProviderInput) {
  const machine = ctx.machine(logic, { id: input.jobId, input });
  machine.start();
  return machine;
}

export class Provider {
  private readonly actor: Actor;
  /** Jobs other nodes reserved or run here, by job id; gone once released. */
  private readonly provided = new Map<string, ProviderMachine>();
  /**
   * Who placed each job that ended here lately, oldest first: the follower's last poll of a
   * short job comes after its end, and asking the orchestrator (a database read) who placed it
   * cost each such job an envelope and a read. Bounded; older jobs are looked up as before.
   */
  private readonly endedFor = new Map<string, string>();
  private readonly bids = new BidBook({ validMs: BID_VALID_MS, perRequester: 1024, total: 16_384 });
  private readonly strikes = new Strikes({ windowMs: STRIKE_WINDOW_MS, bar: STRIKES_TO_BAR, maxRequesters: 4096 });
  /** Whether a key id is one of this node's own. */
  private readonly own: (id: string) => boolean;
  /**
   * The deployment machine with this node's effects, made once: each `provide` builds a whole
   * machine again (every state node and transition), which cost a reserve about a millisecond.
   */
  private readonly machine = providerMachine.provide({
    actions: {
      returnShare: ({ context }) => this.returnShare(context.jobId),
      abandon: ({ context }) => this.abandon(context.jobId),
    },
  });

  constructor(
    private readonly ctx: ActorContext<unknown>,
    private readonly executors: readonly string[],
    private readonly limits: ProviderLimits,
    /** Asks the requesters of jobs run here whether they still want them (./still-wanted.ts). */
    private readonly stillWanted: StillWanted,
    /** Round trips to other nodes, for parts that must run near one; absent without a network. */
    private readonly roundTrips?: RoundTrips,
  ) {
    this.actor = ctx.actor;
    this.own = ownKeys(ctx.system);
  }

  stop(): void {
    for (const m of this.provided.values()) m.stop();
    this.provided.clear();
  }

  /**
   * The node that asked: proven by the kernel for envelopes from the network (the sending
   * peer). A request naming this node must come from this node's own actors: anyone else
   * reaching the deployment behaviors through REST (whose envelopes name this node) would
   * otherwise deploy here as the node itself, past its share and the caller's REST role.
   */
  requesterOf(env: Envelope): string {
    const host = env.from.addr.host || this.actor.system.host;
    if (this.actor.system.isHere(host) && !this.own(env.from.id)) {
      throw new DmsError('forbidden', 'deployment requests naming this node come from its own actors only; submit jobs with /dms/job/submit');
    }
    return host;
  }

  /**
   * Reserve, start, release, logs and cancel are asked of one node by name. Published on the
   * topic, one request would reach every node that opened it (a reserve would lease everywhere at once).
   */
  direct(env: Envelope): void {
    if (isBroadcast(env)) throw new DmsError('forbidden', `${env.be} is taken only as a direct message to one node, never from a topic`);
  }

  async bid(env: Envelope, { jobs }: BidRequest): Promise<BidReply> {
    const requester = this.requesterOf(env);
    const here = this.actor.system.isHere(requester);
    const offer = await this.actor.call(this.manager(), ResourceBehaviors.offer, {}, OfferReply, { ttlMs: CALL_TTL_MS });
    // Parts that must run near another part's node: this node's round trip to each such node.
    const rtts = new Map<string, RoundTrip>();
    await Promise.all(
      [...new Set(jobs.flatMap((j) => (j.near ? [j.near.node] : [])))].map(async (node) =>
        rtts.set(node, this.actor.system.isHere(node) ? { ms: 0 } : this.roundTrips ? await this.roundTrips.to(node) : { error: 'this node has no network to measure it on' }),
      ),
    );
    const barred = here ? null : this.strikes.barred(requester);
    this.bids.purge();
    // What the jobs bid for so far in this request would hold here (see Bid.load), and those this
    // requester was bid lately: a burst of its jobs offered in more than one request went, two
    // at a time, to a node that bid idle in each, and the second was refused (test/multinode/placement.test.ts).
    const taken = here ? { cores: 0, memory: 0 } : this.bids.recentFor(requester, BURST_MS, new Set(jobs.map((j) => j.job_id)));
    const answers = jobs.map((job): BidAnswer => {
      const declined = (why: string): BidAnswer => ({ job_id: job.job_id, declined: why });
      if (!here && !offer.offered) return declined('offers nothing to the network (no onboarded share)');
      if (barred) return declined(barred);
      if (!this.executors.includes(job.executor)) return declined(`has no executor "${job.executor}" (has ${this.executors.join(', ')})`);
      const mismatch = locationMismatch(job.location, offer.location) ?? labelMismatch(job.labels, offer.labels);
      if (mismatch) return declined(mismatch);
      // Each job against the whole free share: a bid is an offer, the reservation decides.
      const short = lacks(job.resources, { label: 'its free share', capacity: offer.free });
      if (short) return declined(short);
      const rtt = job.near ? rtts.get(job.near.node)! : undefined;
      if (rtt && 'error' in rtt) return declined(`cannot measure its round trip to ${job.near!.node}: ${rtt.error}`);
      if (rtt && rtt.ms > job.near!.max_rtt_ms) return declined(`its round trip to ${job.near!.node} is ${rtt.ms} ms, more than near.max_rtt_ms (${job.near!.max_rtt_ms} ms)`);
      const load = loadWith(offer, taken);
      taken.cores += job.resources.cpu.cores;
      taken.memory += job.resources.memory.size;
      // This node's own jobs are reserved by its scheduler, never leased.
      if (!here) this.bids.record(job.job_id, requester, job.resources);
      return { job_id: job.job_id, free: offer.free, load, executors: [...this.executors], ...(rtt && 'ms' in rtt ? { rtt_ms: rtt.ms } : {}) };
    });
    return { node: this.actor.system.host, answers };
  }

  async reserve(env: Envelope, req: z.output<typeof ReserveRequest>): Promise<ReserveReply> {
    this.direct(env);
    const requester = this.requesterOf(env);
    const here = this.actor.system.isHere(requester);
    const known = this.provided.get(req.job_id);
    if (known) return this.reserveAgain(known, requester, req);
    if (this.provided.size >= MAX_DEPLOYMENTS) throw new DmsError('overloaded', 'this node holds as many deployments as it takes', { retryAfter: 5 });
    const offer = here ? null : await this.actor.call(this.manager(), ResourceBehaviors.offer, {}, OfferReply, { ttlMs: CALL_TTL_MS });
    // Another reserve of the same job may have come in while the offer was asked.
    const raced = this.provided.get(req.job_id);
    if (raced) return this.reserveAgain(raced, requester, req);
    const offered = this.bids.take(req.job_id);
    const leaseMs = Math.min(req.lease_ms, this.limits.leaseMs);
    const machine = startMachine(this.ctx, this.machine, {
      jobId: req.job_id,
      requester: offered?.bid.requester ?? requester,
      bid: offered ? { resources: offered.bid.resources, validMs: offered.validMs } : null,
      limits: { ...this.limits, leaseMs },
      group: req.group ?? null,
      startCarried: req.start !== undefined,
    });
    machine.send({
      type: 'reserve',
      requester,
      resources: req.resources,
      here,
      share: { offered: offer?.offered ?? true, offering: offer?.offering ?? req.resources },
      holding: this.holding(requester, req.group ?? null),
      barred: here ? null : this.strikes.barred(requester),
    });
    const refused = machine.getSnapshot().context.refusal;
    if (refused) {
      machine.stop();
      throw new DmsError(refused.kind, refused.message, refused.kind === 'overloaded' ? { retryAfter: 5 } : {});
    }
    this.provided.set(req.job_id, machine);
    this.bids.forget(req.job_id);
    machine.subscribe((s) => {
      if (s.status !== 'done') return;
      if (this.provided.get(req.job_id) === machine) this.provided.delete(req.job_id);
      const unstarted = s.context.unstarted;
      if (unstarted && !here) this.strikes.strike(s.context.requester, unstarted === 'expired' ? STRIKES_TO_BAR : 1);
    });
    try {
      await this.actor.call(this.manager(), ResourceBehaviors.lease, { job_id: req.job_id, resources: req.resources }, LeaseReply, { ttlMs: CALL_TTL_MS });
    } catch (e) {
      machine.send({ type: 'lease_refused', reason: errorText(e) });
      throw e;
    }
    const until = new Date(Date.now() + leaseMs).toISOString();
    machine.send({ type: 'leased', until, resources: req.resources });
    if (!req.start) return { until };
    // Phase two in the same round trip. A refused start is an answer about the job, not about
    // the lease, which the refusal lets go: the requester learns why as from a StartRequest.
    try {
      await this.startOn(machine, req.start, requester);
      return { until, started: true };
    } catch (e) {
      // Still held when a check refused the start: let go as its holder would after a refused start.
      if (machine.getSnapshot().value === 'reserved') machine.send({ type: 'release', requester });
      // Not now, rather than not this job: the reserve is refused, and the placement asks again
      // later instead of spending one of the job's attempts (its run here before still stopping).
      if (deferred(e)) throw e;
      return { until, start_refused: errorText(e) };
    }
  }

  /** A reserve of a job that has a deployment here: its holder gets the same lease back, never a longer one. */
  private reserveAgain(machine: ProviderMachine, requester: string, req: z.output<typeof ReserveRequest>): { until: string } {
    const snap = machine.getSnapshot();
    if (snap.context.requester !== requester) throw new DmsError('conflict', `job ${req.job_id} is reserved here by another node`);
    if (snap.value !== 'reserved') {
      throw new DmsError('conflict', snap.value === 'leasing' ? `job ${req.job_id} is being reserved here already` : `job ${req.job_id} already runs here`);
    }
    return { until: snap.context.until! };
  }

  async start(env: Envelope, { job }: z.output<typeof StartRequest>): Promise<{ job_id: string }> {
    this.direct(env);
    const requester = this.requesterOf(env);
    const machine = this.provided.get(job.id);
    const snap = machine?.getSnapshot();
    // Asked again by its holder, whose first answer came late or not at all: the answer is the
    // job this start began, never a second run.
    if (machine && snap!.context.requester === requester && (snap!.value === 'starting' || snap!.value === 'running')) return this.startedAgain(machine, job.id);
    // Or it ran and ended already (a short job): its record says for whom.
    if (!machine && (await this.recordOf(job.id))?.requester === requester) return { job_id: job.id };
    if (!machine || snap!.context.requester !== requester || snap!.value !== 'reserved') {
      const why = snap?.value === 'leasing' ? 'is still being reserved' : snap?.value === 'starting' || snap?.value === 'running' ? 'runs here already' : 'holds no reservation of yours here (the lease may have run out)';
      throw new DmsError('conflict', `job ${job.id} ${why}`);
    }
    await this.startOn(machine, job, requester);
    return { job_id: job.id };
  }

  /** Starts `job` on the lease its deployment machine holds (reserved, for `requester`); throws as the start's answer would. */
  private async startOn(machine: ProviderMachine, job: z.output<typeof StartRequest>['job'], requester: string): Promise<void> {
    machine.send({ type: 'start', requester, resources: job.resources, here: this.actor.system.isHere(requester), volumes: volumesOf(job.inputs ?? []) });
    const after = machine.getSnapshot();
    if (after.context.refusal) throw new DmsError(after.context.refusal.kind, after.context.refusal.message);
    // It runs on what was leased, and is limited to it: the lease is what the resource manager holds.
    const lease = after.context.lease!;
    try {
      await this.actor.call(this.orchestrator(), JobBehaviors.accept, { job: { ...job, resources: lease }, requester }, JobSchema, { ttlMs: CALL_TTL_MS });
    } catch (e) {
      machine.send({ type: deferred(e) ? 'start_deferred' : 'start_failed' });
      throw e;
    }
    machine.send({ type: 'accepted' });
    if (!this.actor.system.isHere(requester)) this.stillWanted.started(job.id, requester);
  }

  /** The answer to a start its holder asked again: once the first start is over, whether it runs. */
  private async startedAgain(machine: ProviderMachine, jobId: string): Promise<{ job_id: string }> {
    const over = await waitFor(machine, (s) => s.value !== 'starting', { timeout: CALL_TTL_MS }).catch(() => {
      throw new DmsError('timeout', `job ${jobId} is still being started here`);
    });
    if (over.value !== 'running') throw new DmsError('conflict', `job ${jobId} could not be started here`);
    if (over.context.abandoned) throw new DmsError('conflict', `job ${jobId} was released by your node and is being stopped here`);
    return { job_id: jobId };
  }

  release(env: Envelope, jobId: string): Record<string, never> {
    this.direct(env);
    const requester = this.requesterOf(env);
    const machine = this.provided.get(jobId);
    if (machine) machine.send({ type: 'release', requester });
    // None yet, though its reserve may be under way here (asking the resource manager): the bid
    // it would lease on goes, so that reserve is refused instead of leasing a share nobody starts.
    else if (this.bids.take(jobId)?.bid.requester === requester) this.bids.forget(jobId);
    // Anything else released is not (or no longer) the caller's: nothing to do.
    return {};
  }

  ended(jobId: string): void {
    this.stillWanted.ended(jobId);
    const machine = this.provided.get(jobId);
    if (!machine) return;
    machine.send({ type: 'ended' });
    this.provided.delete(jobId);
    rememberNewest(this.endedFor, jobId, machine.getSnapshot().context.requester, MAX_ENDED_REMEMBERED);
  }

  /** Only the node that placed a job here may follow or stop it; to anyone else it does not exist. */
  async requesterOnly(env: Envelope, jobId: string): Promise<void> {
    this.direct(env);
    const requester = this.requesterOf(env);
    // Running now: its deployment knows who asked. Otherwise (ended, or this node restarted) the record says.
    const running = this.provided.get(jobId)?.getSnapshot();
    if (running?.value === 'running' && running.context.requester === requester) return;
    if (this.endedFor.get(jobId) === requester) return;
    const job = await this.recordOf(jobId);
    if (!job || job.requester === null || job.requester !== requester) throw notFound(`job ${jobId} not found`);
  }

  /**
   * Refuses a cancel of a run its requester gave up `givenUpMs` ago (DeploymentCancelRequest)
   * when the job's record here was made since: the job was placed here again, and this run is not
   * the one given up. The age is measured on the requester's clock and compared on this one's.
   */
  async notPlacedSince(jobId: string, givenUpMs: number): Promise<void> {
    const job = await this.recordOf(jobId);
    if (job && Date.parse(job.created_at) > Date.now() - givenUpMs) {
      throw new DmsError('conflict', `job ${jobId} was placed here again after its requester gave the run before up (${givenUpMs} ms ago): this run is not the one to stop`);
    }
  }

  /** This node's record of a job, or null when it has none. */
  private recordOf(jobId: string): Promise<Job | null> {
    return this.actor.call(this.orchestrator(), JobBehaviors.status, { id: jobId }, JobSchema, { ttlMs: CALL_TTL_MS }).catch((e: unknown) => {
      if (e instanceof DmsError && e.kind === 'not_found') return null;
      throw e;
    });
  }

  /**
   * What `requester`'s unstarted leases here hold now (those being leased count what they asked).
   * Those of `group` (one ensemble) are held but not counted as others: an ensemble's leases on
   * one node are reserved together and started together, one reservation in effect.
   */
  private holding(requester: string, group: string | null): Holding {
    const h: Holding = { count: 0, others: 0, cores: 0, memory: 0 };
    for (const m of this.provided.values()) {
      const { value, context } = m.getSnapshot();
      // One whose reserve carries its start is being started now, not held (ProviderInput.startCarried).
      if (context.requester !== requester || context.startCarried || (value !== 'leasing' && value !== 'reserved')) continue;
      const r = context.lease ?? context.bid!.resources;
      h.count++;
      if (group === null || context.group !== group) h.others++;
      h.cores += r.cpu.cores;
      h.memory += r.memory.size;
    }
    return h;
  }

  /** Its holder gave up on a job it asked to start here (it will be placed elsewhere): it must not run on. */
  private abandon(jobId: string): void {
    const reason = 'its requester gave up waiting for its start and released it';
    this.ctx.log.info({ job: jobId }, 'job released by its requester after its start: stopping it');
    this.actor.call(this.orchestrator(), JobBehaviors.cancel, { id: jobId, reason }, JobSchema, { ttlMs: 600_000 }).catch((e: unknown) => {
      this.ctx.log.warn({ job: jobId, err: errorText(e) }, 'a released job could not be stopped');
    });
  }

  private returnShare(jobId: string): void {
    this.actor.tell(this.manager(), ResourceBehaviors.release, { job_ids: [jobId] }).catch((e: unknown) => {
      this.ctx.log.warn({ job: jobId, err: errorText(e) }, 'a lease could not be given back');
    });
  }

  private manager(): Handle {
    return this.actor.local(RESOURCES_INBOX);
  }

  private orchestrator(): Handle {
    return this.actor.local(ORCHESTRATOR_INBOX);
  }
}

/** The load a node's offer would show with `taken` more held: its own figure while nothing more is. */
function loadWith(offer: Offer, taken: { cores: number; memory: number }): number {
  if (taken.cores === 0 && taken.memory === 0) return offer.load;
  const { offering, free } = offer;
  const held = { cores: offering.cpu.cores - free.cpu.cores + taken.cores, memory: offering.memory.size - free.memory.size + taken.memory };
  return Math.max(offer.load, loadOf(held, offering));
}
