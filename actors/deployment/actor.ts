/**
 * The deployment actor (inbox `deployment`, topic `/dms/deployment`): places jobs on the
 * network for this node's orchestrator, and takes jobs other nodes place here.
 *
 * As requester it runs one `placement` machine per job (./placement-machine.ts): offer, collect
 * bids for a short adaptive window, rank them, reserve on the best bidder (phase one), with the
 * job's start in the same request when it can (phase two; otherwise the orchestrator starts it
 * there through the remote executor).
 *
 * As provider (./provider.ts) it answers bids, leases a share for a job it bid on to the node
 * that offered it, and on start hands the job to this node's orchestrator, which runs it on
 * that share with its `requester` recorded; one `deployment` machine per job
 * (./provider-machine.ts) decides. Only that requester may read the job's output or cancel it.
 *
 * Other actors are reached by envelopes only: the resource manager, the orchestrator, and the
 * deployment actors of other nodes.
 */
import { performance } from 'node:perf_hooks';
import type { z } from 'zod';
import { type EventObject, fromCallback, fromPromise, toPromise } from 'xstate';
import {
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
  ExcludeRequest,
  PlaceRequest,
  type PlaceReply,
  ReleaseRequest,
  ReserveReply,
  ReserveRequest,
  StartRequest,
  type StartOutcome,
  startOutcomeOf,
  WantedRequest,
} from '../../behaviors/jobs/deployment.js';
import { JobBehaviors, LogsReply, ORCHESTRATOR_INBOX } from '../../behaviors/jobs/jobs.js';
import { JobSchema } from '../../behaviors/jobs/schema.js';
import type { Actor, GatherOptions } from '../../runtime/actor.js';
import { defineBehavior, replyWhenDone } from '../../runtime/behavior.js';
import { type ActorContext, defineActor } from '../../runtime/component.js';
import { DmsError, errorText } from '../../runtime/errors.js';
import { withRetries } from '../../runtime/retry.js';
import { at, decodePayload, type Envelope, type Handle } from '../../runtime/wire/envelope.js';
import { providerTrust, type ProviderTrust } from '../orchestrator/trust.js';
import { Bidders } from './bidders.js';
import { OwnLeases } from './own-leases.js';
import { type NodeBid, type OfferEvent, placementMachine, type PlacementInput, type ReserveInput } from './placement-machine.js';
import type { ProviderLimits } from './provider-machine.js';
import { Provider } from './provider.js';
import { RoundTrips } from './round-trips.js';
import { answerWanted, type StillWanted, stillWantedOver } from './still-wanted.js';

export interface DeploymentDeps {
  /** Executors this node runs jobs with: what its bids offer. */
  executors: readonly string[];
  /** The peers connected now, and the round trip to one (the libp2p transport); absent without a network. */
  network?: { peers(): string[]; ping?(peer: string): Promise<number> };
  /** What this node grants as a provider, and the lease it asks for as a requester (config `deployment`). */
  limits: ProviderLimits;
  /** Which providers may be sent a job's secrets (`placement.trust`); default: this node only. */
  trusts?: ProviderTrust;
  /** With at most this many peers connected, bids are asked of each directly, not on the topic (`deployment.direct_bid_peers`). */
  directBidPeers: number;
  /** Longest bids are collected after an offer, and late ones waited for (`deployment.bid_window_ms`). */
  bidWindowMs: number;
  /** A job run here for another node that its requester has not polled this long is asked about (`deployment.unfollowed_ask_ms`). */
  unfollowedAskMs: number;
}

/**
 * How long a lease another node granted this one is kept for the bids that came before the grant
 * (./own-leases.ts): a few offer windows, past which no such bid is still ranked.
 */
const OWN_LEASE_HOLD_MS = 2_000;
/** Shortest window once a first bid came: the others come about as fast. */
const MIN_WINDOW_MS = 25;
/** Bytes of one node's answers to an offer at most. */
const MAX_BID_BYTES = 1024 * 1024;
/** How long a node that refused to reserve is asked only when nobody else bid. */
const SUSPECT_MS = 30_000;
/** A local hop, or one to a peer: answered at once unless it is gone. */
const CALL_TTL_MS = 5_000;
/** Pauses before asking a provider that was over its unstarted-lease bound for this node again. */
const RESERVE_RETRIES_MS = [25, 50, 100, 200, 400];

export const DeploymentActor = defineActor({
  inbox: DEPLOYMENT_INBOX,
  topics: [DEPLOYMENT_TOPIC],
  // Every handler waits on other actors (the resource manager, the orchestrator, peers) and
  // its state (the machines) changes only between awaits: many placements at once are what a
  // busy requester needs.
  concurrency: 'node',
  create: (ctx: ActorContext<DeploymentDeps>) => {
    const deployment = new Deployment(ctx);
    return { behaviors: deployment.behaviors(), start: () => deployment.start(), stop: () => deployment.stop() };
  },
});

class Deployment {
  private readonly actor: Actor;
  private readonly provider: Provider;
  private readonly stillWanted: StillWanted;
  /** Nodes that refused to reserve lately, with when. */
  private readonly suspect = new Map<string, number>();
  private readonly bidders: Bidders;
  private readonly machine: typeof placementMachine;
  /** The same, reserving nothing: what a probe (PlaceRequest.probe) runs. */
  private readonly probeMachine: typeof placementMachine;
  /** Offers made in this turn of the event loop, published together at its end. */
  private batch: OfferBatch | null = null;
  /** Leases this node asked others for, which their bids made before may not show. */
  private readonly own = new OwnLeases(OWN_LEASE_HOLD_MS);

  constructor(private readonly ctx: ActorContext<DeploymentDeps>) {
    this.actor = ctx.actor;
    const ping = ctx.deps.network?.ping?.bind(ctx.deps.network);
    this.stillWanted = stillWantedOver(this.actor, ctx.log, ctx.deps.unfollowedAskMs);
    this.provider = new Provider(ctx, ctx.deps.executors, ctx.deps.limits, this.stillWanted, ping ? new RoundTrips(ping) : undefined);
    this.bidders = new Bidders(this.actor, ctx.deps.trusts ?? providerTrust('anchored', this.actor.system.host));
    this.machine = placementMachine.provide({
      actors: {
        offer: fromCallback<EventObject, PlacementInput>(({ input, sendBack }) => this.offer(input, sendBack as (e: OfferEvent) => void)),
        reserve: fromPromise(({ input }: { input: ReserveInput }) => this.reserve(input)),
      },
      delays: { straggle: ctx.deps.bidWindowMs },
    });
    this.probeMachine = this.probing();
  }

  /** Started after the orchestrator, which has picked up the jobs a previous process ran for other nodes: their requesters are asked about them. */
  start(): void {
    void this.stillWanted.pickUp().catch((e: unknown) => this.ctx.log.warn({ err: errorText(e) }, 'jobs run for other nodes not asked about after the restart'));
  }

  stop(): void {
    this.stillWanted.close();
    this.provider.stop();
  }

  /**
   * A lease on `input.node` (phase one), asked again briefly while it is over its bound for this
   * node; with `input.start`, the job started on it in the same round trip (phase two).
   */
  private async reserve(input: ReserveInput): Promise<StartOutcome> {
    const lease = { job_id: input.jobId, resources: input.resources, lease_ms: this.ctx.deps.limits.leaseMs, ...(input.group ? { group: input.group } : {}) };
    let start = input.start;
    const ask = () => this.actor.call(this.deploymentOf(input.node), DeploymentBehaviors.reserve, start ? { ...lease, start } : lease, ReserveReply, { ttlMs: CALL_TTL_MS });
    const retryable = (e: unknown): boolean => {
      if (!(e instanceof DmsError)) return false;
      // A provider caps what one requester holds unstarted: this node's own other leases there
      // start within milliseconds, so a batch of placements waits for them briefly.
      if (e.kind === 'overloaded') return true;
      // A provider that reads no start in a reserve (an older release) refuses the whole reserve
      // as invalid: asked again without, the job is started as a second step.
      if (e.kind === 'invalid' && start) {
        start = null;
        return true;
      }
      return false;
    };
    const answered = this.own.asking(input.node, input.jobId, input.resources);
    try {
      const reply = await withRetries(ask, { pauses: RESERVE_RETRIES_MS, retryable });
      answered(true);
      // Asked again without the start (an older provider): the start is still to come.
      return start ? (startOutcomeOf(reply) ?? {}) : {};
    } catch (e) {
      answered(false);
      // Unanswered, it may still have leased: let it go there, or the lease runs out unstarted,
      // which that provider counts against this node as much as a requester that hoards.
      if (e instanceof DmsError && e.kind === 'timeout') {
        void this.actor.tell(this.deploymentOf(input.node), DeploymentBehaviors.release, { job_id: input.jobId }).catch(() => undefined);
      }
      this.suspect.set(input.node, Date.now());
      throw e;
    }
  }

  private probing() {
    return this.machine.provide({ actors: { reserve: fromPromise(async (): Promise<StartOutcome> => ({})) } });
  }

  behaviors() {
    return [
      defineBehavior({ name: DeploymentBehaviors.bid, payload: BidRequest, capability: DEPLOYMENT_CAPABILITY, handle: ({ env, payload }) => this.provider.bid(env, payload) }),
      defineBehavior({ name: DeploymentBehaviors.reserve, payload: ReserveRequest, capability: DEPLOYMENT_CAPABILITY, handle: ({ env, payload }) => this.provider.reserve(env, payload) }),
      defineBehavior({ name: DeploymentBehaviors.start, payload: StartRequest, capability: DEPLOYMENT_CAPABILITY, handle: ({ env, payload }) => this.provider.start(env, payload) }),
      defineBehavior({ name: DeploymentBehaviors.release, payload: ReleaseRequest, capability: DEPLOYMENT_CAPABILITY, handle: ({ env, payload }) => this.provider.release(env, payload.job_id) }),
      defineBehavior({
        name: DeploymentBehaviors.logs,
        payload: DeploymentLogsRequest,
        capability: DEPLOYMENT_CAPABILITY,
        noReply: true,
        handle: (c) =>
          replyWhenDone(c, async () => {
            await this.provider.requesterOnly(c.env, c.payload.id);
            // A poll, and one held open, is its requester following the job (./still-wanted.ts).
            this.stillWanted.heard(c.payload.id);
            try {
              return await this.actor.call(this.orchestrator(), JobBehaviors.logs, c.payload, LogsReply, { ttlMs: c.payload.wait_ms + CALL_TTL_MS });
            } finally {
              this.stillWanted.heard(c.payload.id);
            }
          }),
      }),
      defineBehavior({
        name: DeploymentBehaviors.cancel,
        payload: DeploymentCancelRequest,
        capability: DEPLOYMENT_CAPABILITY,
        noReply: true,
        handle: (c) =>
          replyWhenDone(c, async () => {
            const { id, reason, given_up_ms } = c.payload;
            await this.provider.requesterOnly(c.env, id);
            if (given_up_ms !== undefined) await this.provider.notPlacedSince(id, given_up_ms);
            // A stop takes the engine's grace period and more.
            return this.actor.call(this.orchestrator(), JobBehaviors.cancel, { id, ...(reason ? { reason } : {}) }, JobSchema, { ttlMs: 600_000 });
          }),
      }),
      // Asked of this node as a requester, by the nodes its jobs were placed on.
      defineBehavior({
        name: DeploymentBehaviors.wanted,
        payload: WantedRequest,
        // Its own name, opened to every node (daemon/security.ts): what it answers is checked against the asker.
        capability: DeploymentBehaviors.wanted,
        handle: ({ env, payload }) => answerWanted(this.actor, env, payload.job_id),
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
          this.provider.ended(payload.job_id);
        },
      }),
      defineBehavior({
        name: DeploymentBehaviors.exclude,
        payload: ExcludeRequest,
        capability: DEPLOYMENT_INTERNAL_CAPABILITY,
        handle: ({ payload }) => {
          this.ctx.log.warn({ node: payload.node, reason: payload.reason }, 'node excluded from placements');
          this.bidders.exclude(payload.node, payload.reason);
        },
      }),
    ];
  }

  // --- requester -------------------------------------------------------------------------

  private async place(p: z.output<typeof PlaceRequest>): Promise<PlaceReply> {
    const now = Date.now();
    for (const [node, at] of this.suspect) if (now - at > SUSPECT_MS) this.suspect.delete(node);
    if (p.probed && !p.probe) {
      // The probe's bid stands (checked there, and in the provider's bid book): a second offer
      // would ask the same nodes the same question a moment later. Refused, the offer goes out.
      if (this.actor.system.isHere(p.probed)) return { node: p.probed };
      if (!p.exclude.includes(p.probed) && !this.suspect.has(p.probed)) {
        try {
          const outcome = await this.reserve({ node: p.probed, jobId: p.job_id, resources: p.resources, group: p.group ?? null, start: p.start ?? null });
          return { node: p.probed, ...outcome };
        } catch (e) {
          this.ctx.log.debug({ job: p.job_id, node: p.probed, err: errorText(e) }, 'the probed node refused to reserve: offering again');
        }
      }
    }
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
      vet: await this.bidders.vet(p.placement, p.secrets),
      fits: (bid: NodeBid) => this.own.fits(bid.node, p.job_id, p.resources, bid.free, bid.at),
      near: p.near ?? null,
      group: p.group ?? null,
      // A probe reserves nothing, and an ensemble's parts start once all are reserved.
      start: p.probe || p.group ? null : (p.start ?? null),
      expected,
    };
    const run = this.ctx.machine(p.probe ? this.probeMachine : this.machine, { id: p.job_id, input });
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
      ...(input.near ? { near: input.near } : {}),
    };
    const pinned = input.placement?.node;
    if (pinned) {
      let stopped = false;
      sendBack({ type: 'offered' });
      this.actor.call(this.deploymentOf(pinned), DeploymentBehaviors.bid, { jobs: [job] }, BidReply, { ttlMs: CALL_TTL_MS }).then(
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
   * Sends the offers made at one moment in one bid request, to each connected peer directly
   * (up to `directBidPeers` of them) or else on the topic, and hands each answer to its job's
   * machine. The window closes when every node that could answer has, or
   * twice the first remote answer's delay after the offer (at least MIN_WINDOW_MS), or at
   * `deployment.bid_window_ms`.
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
    const opts: GatherOptions = {
      windowMs: this.ctx.deps.bidWindowMs,
      max: 1024,
      maxBytes: MAX_BID_BYTES,
      // A node answers once; its answers are taken as they come and not kept: one peer answering
      // many times over, or a few with replies as large as an envelope, cannot end the collection
      // before the other nodes' bids arrive.
      perHost: { replies: 1 },
      keep: false,
      signal: batch.ac.signal,
      enough: (replies) => {
        const last = replies[replies.length - 1];
        const reply = bidsOf(last);
        if (reply) {
          for (const answer of reply.answers) batch.listeners.get(answer.job_id)?.({ type: 'bid', node: reply.node, answer });
        }
        // Timed from the first answer across the network: this node's own comes at once.
        if (!this.actor.system.isHere(last.from.addr.host)) {
          window ??= setTimeout(close, Math.min(this.ctx.deps.bidWindowMs, Math.max(MIN_WINDOW_MS, 2 * (performance.now() - began))));
        }
        return false;
      },
    };
    // A requester with few peers asks each directly: a gossip hop costs more than the envelope
    // a peer, and the machine waits for the connected peers' answers either way (`expected`).
    const peers = this.ctx.deps.network?.peers() ?? [];
    const request = { jobs: batch.jobs };
    const asked =
      peers.length > 0 && peers.length <= this.ctx.deps.directBidPeers
        ? this.actor.gatherFrom([this.actor.local(DEPLOYMENT_INBOX), ...peers.map((p) => at(DEPLOYMENT_INBOX, p))], DeploymentBehaviors.bid, request, opts)
        : this.actor.gather(DEPLOYMENT_TOPIC, DeploymentBehaviors.bid, request, opts);
    asked.then(close, (e: unknown) => !batch.ac.signal.aborted && tell({ type: 'offer_failed', reason: `the offer could not be sent: ${errorText(e)}` }));
  }

  private deploymentOf(node: string): Handle {
    return this.actor.system.isHere(node) ? this.actor.local(DEPLOYMENT_INBOX) : at(DEPLOYMENT_INBOX, node);
  }

  private orchestrator(): Handle {
    return this.actor.local(ORCHESTRATOR_INBOX);
  }
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
