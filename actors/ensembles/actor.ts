/**
 * The ensemble actor (inbox `ensembles`, README "Ensembles"): takes an ensemble, makes each part
 * a job through the orchestrator (held there for the ensemble), and drives one `ensemble`
 * machine (./machine.ts) per ensemble until it ends.
 *
 * Placement is all or nothing: every part waiting gets its bids and a lease (through the
 * deployment actor, as any job; this node's own share through the resource manager), and only
 * when every one is held are the hosts told who hosts what (the members grant their
 * `ensemble-net` actors keep) and the parts assigned, each then started by its own job
 * machine. A lease refused for one part lets go of every other lease of the round, and the
 * round is tried again after a back-off. The grant is renewed while the ensemble lives and
 * withdrawn when it ends.
 *
 * Other actors are reached by envelopes only: the orchestrator, the deployment actor, the
 * resource manager, and the `ensemble-net` actors of the hosts.
 */
import { randomUUID } from 'node:crypto';
import { fromPromise } from 'xstate';
import { z } from 'zod';
import { DEPLOYMENT_INBOX, DeploymentBehaviors, type NearNode, PlaceReply } from '../../behaviors/jobs/deployment.js';
import { JobBehaviors, MAX_LIST_BYTES, ORCHESTRATOR_INBOX } from '../../behaviors/jobs/jobs.js';
import { ReleaseReply, ReserveReply, ResourceBehaviors, RESOURCES_INBOX } from '../../behaviors/jobs/resources.js';
import { type Job, JobSchema, type JobSpecInput } from '../../behaviors/jobs/schema.js';
import {
  ENSEMBLE_INBOX,
  ENSEMBLE_INTERNAL_CAPABILITY,
  ENSEMBLE_NET_INBOX,
  type Ensemble,
  EnsembleBehaviors,
  EnsembleNetBehaviors,
  type EnsembleSpec,
  EnsembleSpecSchema,
  type EnsembleMembers,
  type EnsembleStatus,
  MAX_GRANT_MS,
  PartBehaviors,
  PartChangedPayload,
  type PartSpec,
  placementOrder,
} from '../../behaviors/ensembles/schema.js';
import type { Actor } from '../../runtime/actor.js';
import { defineBehavior, replyWhenDone } from '../../runtime/behavior.js';
import { type ActorContext, defineActor } from '../../runtime/component.js';
import { DmsError, errorText, invalid, notFound } from '../../runtime/errors.js';
import { at, type Handle } from '../../runtime/wire/envelope.js';
import type { EnsembleRow, Storage } from '../../storage/index.js';
import { DEFAULT_ENSEMBLE_BACKOFF, type EnsembleContext, ensembleMachine, type PartCtx, type PlaceRoundInput, type PlaceRoundOutput } from './machine.js';

export interface EnsemblesDeps {
  storage: Storage;
  /** Whether the deployment actor is there (a node with a network): without it every part runs here. */
  network: boolean;
  /** The back-off between fruitless rounds (`deployment.offer_retry_ms`, `deployment.max_offer_backoff_ms`). */
  backoff?: { firstMs: number; maxMs: number };
  /** How often the members grant is renewed (default a quarter of its life). */
  renewMs?: number;
  /** Ensembles driven at once (`ensembles.max_live`). */
  maxLive: number;
}

/** Longest one part's placement (offer, bids, a lease) may take. */
const PLACE_TTL_MS = 30_000;
/** A local hop, or one to a host: answered at once unless it is gone. */
const CALL_TTL_MS = 5_000;
/** A cancel answers once the run stopped, which can take the engine's grace period. */
const CANCEL_TTL_MS = 600_000;
const LIST_MAX = 100;

export const ListPayload = z.strictObject({
  limit: z.int().min(1).max(LIST_MAX).default(LIST_MAX),
  offset: z.int().nonnegative().default(0),
});
export const IdPayload = z.strictObject({ id: z.string().min(1).max(100) });
export const CancelPayload = z.strictObject({ id: z.string().min(1).max(100), reason: z.string().min(1).max(500).optional() });

export const EnsemblesActor = defineActor({
  inbox: ENSEMBLE_INBOX,
  // Handlers wait on the orchestrator, the deployment actor and the database; each ensemble's
  // state is its machine's, changed only by events, so handlers may overlap.
  concurrency: 'node',
  create: (ctx: ActorContext<EnsemblesDeps>) => {
    const ensembles = new Ensembles(ctx);
    return { behaviors: ensembles.behaviors(), start: () => ensembles.recover(), stop: () => ensembles.stop() };
  },
});

type EnsembleRun = ReturnType<Ensembles['makeMachine']>;

interface Live {
  id: string;
  spec: EnsembleSpec;
  machine: EnsembleRun;
  /** Rounds that placed parts (the ensemble's `attempts`). */
  rounds: number;
  /** The grant's version, the hosts it was sent to, and its parts as sent (JSON). */
  version: number;
  granted: Set<string>;
  grantedNodes: string;
  /** Stored status and reason, as last written. */
  stored: { status: EnsembleStatus; reason: string | null };
  writes: Promise<unknown>;
  settled: Promise<void>;
  done: () => void;
}

class Ensembles {
  private readonly actor: Actor;
  private readonly storage: Storage;
  private readonly live = new Map<string, Live>();
  /** Submits not yet tracked: they count against ensembles.max_live, or submits arriving together all pass it. */
  private submitting = 0;
  private readonly machine;
  private renewal: NodeJS.Timeout | undefined;
  /**
   * Settles once recover() tracks every ensemble left unfinished. The orchestrator's own
   * recovery reports its parts meanwhile (a job failed because its run is gone); a report
   * heard before its ensemble is tracked again would otherwise be dropped, and the row read
   * may be older than it.
   */
  private readonly recovered: Promise<void>;
  private markRecovered!: () => void;

  constructor(private readonly ctx: ActorContext<EnsemblesDeps>) {
    this.recovered = new Promise<void>((resolve) => (this.markRecovered = resolve));
    this.actor = ctx.actor;
    this.storage = ctx.deps.storage;
    this.machine = ensembleMachine.provide({
      actors: { place: fromPromise<PlaceRoundOutput, PlaceRoundInput>(({ input, signal }) => this.placeRound(input, signal)) },
      actions: {
        restart: ({ context }, params: { part: string }) => void this.restart(context.id, params.part),
        cancelPart: (_, params: { jobId: string; reason: string }) => void this.cancelJob(params.jobId, params.reason),
        stopParts: ({ context }, params: { reason: string }) => this.stopParts(context, params.reason),
        revoke: ({ context }) => this.revoke(context.id),
      },
    });
  }

  behaviors() {
    return [
      defineBehavior({ name: EnsembleBehaviors.submit, payload: EnsembleSpecSchema, handle: ({ payload }) => this.submit(payload) }),
      defineBehavior({ name: EnsembleBehaviors.status, payload: IdPayload, handle: ({ payload }) => this.view(payload.id) }),
      defineBehavior({
        name: EnsembleBehaviors.list,
        payload: ListPayload,
        handle: async ({ payload }) => {
          // Bounded in bytes as the jobs list is; the total counts every page.
          const [rows, total] = await Promise.all([this.storage.ensembles.list({ ...payload, maxBytes: MAX_LIST_BYTES }), this.storage.ensembles.count()]);
          return { ensembles: await Promise.all(rows.map((row) => this.viewOf(row))), total };
        },
      }),
      defineBehavior({
        name: EnsembleBehaviors.cancel,
        payload: CancelPayload,
        noReply: true,
        handle: (c) => replyWhenDone(c, () => this.cancel(c.payload.id, c.payload.reason)),
      }),
      defineBehavior({
        name: PartBehaviors.changed,
        payload: PartChangedPayload,
        capability: ENSEMBLE_INTERNAL_CAPABILITY,
        handle: async ({ payload }) => {
          await this.recovered;
          const live = this.live.get(payload.ensemble);
          if (!live) return;
          live.machine.send({ type: 'part', change: payload });
          // The hosts hear at once that a part left its node or runs on a new one.
          if (live.granted.size > 0 && JSON.stringify(this.membersOf(live)) !== live.grantedNodes) void this.grant(live).catch(() => undefined);
        },
      }),
    ];
  }

  stop(): void {
    clearInterval(this.renewal);
    for (const live of this.live.values()) live.machine.stop();
  }

  // --- submit, read, cancel ---------------------------------------------------------------

  async submit(spec: EnsembleSpec): Promise<Ensemble> {
    // Its parts' jobs, made before it is tracked, would look stray to recovery (endStrayParts),
    // and the ensembles recovery tracks count against the bound.
    await this.recovered;
    if (this.live.size + this.submitting >= this.ctx.deps.maxLive) {
      throw new DmsError('overloaded', `this node drives ${this.live.size + this.submitting} ensembles not yet ended, as many as ensembles.max_live allows (${this.ctx.deps.maxLive}); cancel one or wait for one to end`, { retryAfter: 5 });
    }
    this.submitting++;
    try {
      return await this.make(spec);
    } finally {
      this.submitting--;
    }
  }

  private async make(spec: EnsembleSpec): Promise<Ensemble> {
    const id = randomUUID();
    const row = await this.storage.ensembles.create(id, spec);
    const order = placementOrder(spec.parts);
    // Made together, so their writes share one group commit (storage) instead of one each.
    const made = await Promise.allSettled(order.map((name) => this.createPart(id, spec, name)));
    const parts: Record<string, PartCtx> = {};
    made.forEach((r, i) => {
      if (r.status === 'fulfilled') parts[order[i]!] = partCtx(spec.parts[order[i]!]!, order[i]!, r.value, 0);
    });
    const refused = made.findIndex((r) => r.status === 'rejected');
    if (refused >= 0) {
      const e = (made[refused] as PromiseRejectedResult).reason as unknown;
      const reason = `part ${order[refused]}: ${errorText(e)}`;
      await Promise.all(Object.values(parts).map((p) => this.cancelJob(p.jobId!, 'its ensemble was refused')));
      await this.storage.ensembles.update(id, { status: 'failed', reason });
      if (e instanceof DmsError) throw new DmsError(e.kind, reason, { cause: e });
      throw e;
    }
    this.track(row, parts);
    return this.view(id);
  }

  async view(id: string): Promise<Ensemble> {
    const row = await this.storage.ensembles.get(id);
    if (!row) throw notFound(`ensemble ${id} not found`);
    return this.viewOf(row);
  }

  private async viewOf(row: EnsembleRow): Promise<Ensemble> {
    const jobs = await this.storage.jobs.list({ ensemble: row.id, order: 'asc' });
    const newest = new Map<string, Job>();
    for (const job of jobs) if (job.part) newest.set(job.part, job);
    const live = this.live.get(row.id);
    const state = live ? stateOf(live.machine.getSnapshot()) : { status: row.status, reason: row.reason ?? null };
    return {
      id: row.id,
      name: row.name,
      status: state.status,
      reason: state.reason,
      attempts: row.attempts,
      parts: Object.entries(row.spec.parts).map(([part, spec]) => {
        const job = newest.get(part);
        return {
          part,
          kind: spec.kind,
          job_id: job?.id ?? '00000000-0000-4000-8000-000000000000',
          node: job?.node ?? null,
          status: job?.status ?? 'pending',
          ports: spec.ports,
          restarts: row.restarts[part] ?? 0,
          error: job?.error ?? null,
        };
      }),
      spec: row.spec,
      created_at: row.created_at.toISOString(),
      updated_at: row.updated_at.toISOString(),
    };
  }

  async cancel(id: string, reason?: string): Promise<Ensemble> {
    const live = this.live.get(id);
    if (!live) {
      const row = await this.storage.ensembles.get(id);
      if (!row) throw notFound(`ensemble ${id} not found`);
      throw new DmsError('conflict', `ensemble ${id} has already ${row.status}`);
    }
    live.machine.send({ type: 'cancel', reason: reason ? `cancelled: ${reason}` : 'cancelled' });
    await live.settled;
    return this.view(id);
  }

  // --- the machines ------------------------------------------------------------------------

  makeMachine(id: string, parts: Record<string, PartCtx>) {
    return this.ctx.machine(this.machine, { id, input: { id, parts, backoff: this.ctx.deps.backoff ?? DEFAULT_ENSEMBLE_BACKOFF } });
  }

  private track(row: EnsembleRow, parts: Record<string, PartCtx>): Live {
    const machine = this.makeMachine(row.id, parts);
    let done!: () => void;
    const settled = new Promise<void>((resolve) => (done = resolve));
    const live: Live = { id: row.id, spec: row.spec, machine, rounds: row.attempts, version: 0, granted: new Set(), grantedNodes: '', stored: { status: row.status, reason: row.reason ?? null }, writes: Promise.resolve(), settled, done };
    this.live.set(row.id, live);
    machine.subscribe((snapshot) => {
      const state = stateOf(snapshot);
      if (state.status !== live.stored.status || state.reason !== live.stored.reason) {
        live.stored = state;
        live.writes = live.writes
          .then(() => this.storage.ensembles.update(row.id, state))
          .catch((e: unknown) => this.ctx.log.error({ ensemble: row.id, err: errorText(e) }, 'ensemble state not stored'));
      }
      if (snapshot.status === 'done') {
        this.live.delete(row.id);
        void live.writes.then(done);
      }
    });
    machine.start();
    this.renewal ??= setInterval(() => this.renewAll(), this.ctx.deps.renewMs ?? MAX_GRANT_MS / 4).unref();
    return live;
  }

  /** Ensembles a previous process left unfinished are driven on from what their parts' jobs say. */
  async recover(): Promise<void> {
    try {
      await this.recoverAll();
    } finally {
      this.markRecovered();
    }
  }

  private async recoverAll(): Promise<void> {
    for (const row of await this.storage.ensembles.live()) {
      const jobs = await this.storage.jobs.list({ ensemble: row.id, order: 'asc' });
      const parts: Record<string, PartCtx> = {};
      for (const [name, spec] of Object.entries(row.spec.parts)) {
        const job = jobs.filter((j) => j.part === name).at(-1);
        if (job) parts[name] = partCtx(spec, name, job, row.restarts[name] ?? 0);
      }
      if (Object.keys(parts).length !== Object.keys(row.spec.parts).length) {
        await this.storage.ensembles.update(row.id, { status: 'failed', reason: 'the node stopped while its parts were being made' });
        continue;
      }
      const live = this.track(row, parts);
      // Its hosts hear from this node again now, not only once their grants are about to end.
      if (Object.values(parts).some((p) => p.node !== null)) {
        void this.grant(live).catch((e: unknown) => this.ctx.log.warn({ ensemble: row.id, err: errorText(e) }, 'members grant not renewed after restart'));
      }
    }
    await this.endStrayParts();
  }

  /**
   * Part jobs whose ensemble is not driven any more end: those made before the node stopped in
   * the middle of making it (failed above, or at an earlier start that stopped before this), or
   * outliving it. The orchestrator holds them for a placement only their ensemble gives, so
   * they would wait for ever, listed as pending. Not waited for: a running one stops within
   * its grace period, which the node's start need not take.
   */
  private async endStrayParts(): Promise<void> {
    for (const job of await this.storage.jobs.list({ status: ['pending', 'running'] })) {
      if (job.ensemble === null || job.requester !== null || this.live.has(job.ensemble)) continue;
      const row = await this.storage.ensembles.get(job.ensemble);
      const why = row ? `${row.status}${row.reason ? `: ${row.reason}` : ''}` : 'is gone';
      void this.cancelJob(job.id, `its ensemble ${job.ensemble} ${why}`.slice(0, 480));
    }
  }

  // --- placement: all or nothing -------------------------------------------------------------

  /**
   * One round: every part given gets a lease at once (their offers travel together), and only
   * if every one was had are the hosts granted and the parts assigned. Anything less lets go of
   * every lease of the round.
   */
  private async placeRound({ ensemble, parts }: PlaceRoundInput, signal: AbortSignal): Promise<PlaceRoundOutput> {
    const live = this.live.get(ensemble);
    if (!live) throw new Error('ensemble is gone');
    const context = live.machine.getSnapshot().context;
    const known: Record<string, string | null> = Object.fromEntries(Object.values(context.parts).map((p) => [p.part, p.node]));
    const jobs = new Map((await Promise.all(parts.map((p) => this.storage.jobs.get(p.jobId!)))).map((job, i) => [parts[i]!.part, job]));
    // First every part is only asked about: one nobody can hold fails the round before any
    // lease is taken (a lease let go unstarted counts against this node at its provider).
    const probed = await this.inSteps(live, parts, { ...known }, (p, near) => this.reservePart(p, jobs.get(p.part)!, near, true));
    if (probed.lost.length > 0 || signal.aborted) throw new Error(probed.lost.join('; ') || 'cancelled');
    // Each part is reserved where its probe chose (no second offer), unless it must be near a
    // part that went elsewhere this time; refused there, its offer goes out again (deployment).
    const chosen = Object.fromEntries(probed.won.map((w) => [w.part.part, w.node]));
    const nodes = { ...known };
    const { won, lost } = await this.inSteps(live, parts, nodes, (p, near) => {
      const anchor = live.spec.parts[p.part]?.near?.part;
      const same = !anchor || nodes[anchor] === (chosen[anchor] ?? known[anchor]);
      return this.reservePart(p, jobs.get(p.part)!, near, false, same ? chosen[p.part] : undefined);
    });
    if (lost.length > 0 || signal.aborted) {
      await this.release(won);
      throw new Error(lost.join('; ') || 'cancelled');
    }
    try {
      await this.grant(live, nodes);
    } catch (e) {
      await this.release(won);
      throw e;
    }
    // Every lease is held and every host granted: the parts start together, none waits for another's assignment.
    await Promise.all(
      won.map(async (w) => {
        try {
          await this.actor.call(this.orchestrator(), PartBehaviors.assign, { job_id: w.part.jobId, node: w.node }, z.object({}), { ttlMs: CALL_TTL_MS });
        } catch (e) {
          // Cancelled meanwhile: its lease goes back; the report of its end follows.
          await this.release([w]);
          this.ctx.log.warn({ ensemble, part: w.part.part, err: errorText(e) }, 'part not assigned');
        }
      }),
    );
    this.actor.system.metrics?.placements.labels('placed').inc(won.length);
    live.rounds++;
    const attempts = live.rounds;
    live.writes = live.writes.then(() => this.storage.ensembles.update(ensemble, { attempts })).catch(() => undefined);
    return Object.fromEntries(won.map((w) => [w.part.part, w.node]));
  }

  /**
   * Asks `ask` for every part, in steps: a part that must be near another part of the round is
   * asked once that part has its node (in `nodes`, filled in as answers come); the rest of a
   * step is asked at once, so their offers travel together. Stops at the first step with a failure.
   */
  private async inSteps(live: Live, parts: PartCtx[], nodes: Record<string, string | null>, ask: (p: PartCtx, near?: NearNode) => Promise<string>) {
    const won: { part: PartCtx; node: string }[] = [];
    const lost: string[] = [];
    const nearOf = (p: PartCtx) => live.spec.parts[p.part]?.near;
    let left = parts;
    while (left.length > 0 && lost.length === 0) {
      const ready = left.filter((p) => !left.some((q) => q.part === nearOf(p)?.part));
      const results = await Promise.allSettled(
        ready.map((p) => {
          const near = nearOf(p);
          const node = near ? nodes[near.part] : null;
          return ask(p, node ? { node, max_rtt_ms: near!.max_rtt_ms } : undefined);
        }),
      );
      results.forEach((r, i) => {
        if (r.status === 'fulfilled') {
          won.push({ part: ready[i]!, node: r.value });
          nodes[ready[i]!.part] = r.value;
        } else lost.push(`part ${ready[i]!.part}: ${errorText(r.reason)}`);
      });
      left = left.filter((p) => !ready.includes(p));
    }
    return { won, lost };
  }

  /** A lease for one part: from the network's best bidder, or this node's resource manager. */
  private async reservePart(part: PartCtx, job: Job | null, near: NearNode | undefined, probe: boolean, probed?: string): Promise<string> {
    if (!job) throw notFound(`job ${part.jobId} of part ${part.part} is gone`);
    let node = this.actor.system.host;
    if (this.ctx.deps.network) {
      const request = {
        job_id: job.id,
        resources: job.resources,
        executor: job.executor,
        placement: job.placement,
        exclude: part.exclude,
        secrets: Object.keys(job.secrets).length > 0,
        ...(near ? { near } : {}),
        probe,
        ...(probed ? { probed } : {}),
        // Its leases are the ensemble's: one reservation in effect, at each provider.
        group: job.ensemble ?? undefined,
      };
      const reply = await this.actor.call(this.actor.local(DEPLOYMENT_INBOX), DeploymentBehaviors.place, request, PlaceReply, { ttlMs: PLACE_TTL_MS });
      if ('waiting' in reply) throw new Error(reply.waiting);
      node = reply.node;
    }
    if (this.actor.system.isHere(node) && !probe) {
      const reply = await this.actor.call(this.actor.local(RESOURCES_INBOX), ResourceBehaviors.reserve, { jobs: [{ job_id: job.id, resources: job.resources }] }, ReserveReply);
      const refused = reply.refused[0];
      if (refused) throw new Error(`this node cannot hold it now: ${refused.reason}`);
    }
    return node;
  }

  private async release(won: { part: PartCtx; node: string }[]): Promise<void> {
    const here = won.filter((w) => this.actor.system.isHere(w.node)).map((w) => w.part.jobId!);
    const calls: Promise<unknown>[] = won
      .filter((w) => !this.actor.system.isHere(w.node))
      .map((w) => this.actor.call(at(DEPLOYMENT_INBOX, w.node), DeploymentBehaviors.release, { job_id: w.part.jobId }, z.unknown(), { ttlMs: CALL_TTL_MS }));
    if (here.length) calls.push(this.actor.call(this.actor.local(RESOURCES_INBOX), ResourceBehaviors.release, { job_ids: here }, ReleaseReply));
    for (const r of await Promise.allSettled(calls)) if (r.status === 'rejected') this.ctx.log.warn({ err: errorText(r.reason) }, 'lease not released');
  }

  // --- the members grant -------------------------------------------------------------------

  /** Who hosts each part with a job now (`nodes` overriding where a round just reserved). */
  private membersOf(live: Live, nodes?: Record<string, string | null>): EnsembleMembers['parts'] {
    return Object.values(live.machine.getSnapshot().context.parts).flatMap((p) =>
      p.jobId === null ? [] : [{ part: p.part, job_id: p.jobId, node: nodes ? (nodes[p.part] ?? null) : p.node, ports: p.ports }],
    );
  }

  /**
   * Tells every node hosting a part (this one included) who hosts each part: the names its
   * parts get, and whose tunnels it lets in. Every host must take it, or the round fails.
   */
  private async grant(live: Live, nodes?: Record<string, string | null>): Promise<void> {
    const parts = this.membersOf(live, nodes);
    const members = { ensemble: live.id, version: ++live.version, expires_at: Date.now() + MAX_GRANT_MS, parts };
    const hosts = new Set(members.parts.flatMap((p) => (p.node ? [p.node] : [])));
    await Promise.all([...hosts].map((node) => this.actor.call(this.netOf(node), EnsembleNetBehaviors.members, members, z.unknown(), { ttlMs: CALL_TTL_MS })));
    // Hosts no part runs on any more: their grant goes now rather than when it expires.
    for (const node of live.granted) if (!hosts.has(node)) void this.actor.tell(this.netOf(node), EnsembleNetBehaviors.revoke, { ensemble: live.id }).catch(() => undefined);
    live.granted = hosts;
    live.grantedNodes = JSON.stringify(parts);
  }

  private renewAll(): void {
    for (const live of this.live.values()) {
      if (live.granted.size === 0) continue;
      this.grant(live).catch((e: unknown) => this.ctx.log.warn({ ensemble: live.id, err: errorText(e) }, 'members grant not renewed'));
    }
  }

  private revoke(id: string): void {
    const live = this.live.get(id);
    if (!live) return;
    for (const node of live.granted) void this.actor.tell(this.netOf(node), EnsembleNetBehaviors.revoke, { ensemble: id }).catch(() => undefined);
    live.granted = new Set();
  }

  // --- parts -----------------------------------------------------------------------------------

  private async createPart(id: string, spec: EnsembleSpec, name: string): Promise<Job> {
    return this.actor.call(this.orchestrator(), PartBehaviors.create, { ensemble: id, part: name, job_id: randomUUID(), spec: jobSpecOf(spec, name) }, JobSchema, { ttlMs: CALL_TTL_MS });
  }

  /** A part failed with restarts left: a new job for it, which the machine then places. */
  private async restart(id: string, part: string): Promise<void> {
    const live = this.live.get(id);
    if (!live) return;
    try {
      const job = await this.createPart(id, live.spec, part);
      const restarts = Object.fromEntries(Object.values(live.machine.getSnapshot().context.parts).map((p) => [p.part, p.restarts]));
      live.writes = live.writes.then(() => this.storage.ensembles.update(id, { restarts })).catch(() => undefined);
      live.machine.send({ type: 'restarted', part, jobId: job.id });
      // Stopped meanwhile: the new job goes the way of the others.
      if (live.machine.getSnapshot().matches('stopping')) void this.cancelJob(job.id, 'its ensemble is stopping');
    } catch (e) {
      live.machine.send({ type: 'restart_failed', part, reason: errorText(e) });
    }
  }

  private stopParts(context: EnsembleContext, reason: string): void {
    for (const p of Object.values(context.parts)) {
      if (p.jobId && p.status !== 'completed' && p.status !== 'failed') void this.cancelJob(p.jobId, reason);
    }
  }

  private async cancelJob(jobId: string, reason: string): Promise<void> {
    try {
      await this.actor.call(this.orchestrator(), JobBehaviors.cancel, { id: jobId, reason }, JobSchema, { ttlMs: CANCEL_TTL_MS });
    } catch (e) {
      // Already ended: its report is what the machine waits for.
      if (!(e instanceof DmsError && e.kind === 'conflict')) this.ctx.log.warn({ job: jobId, err: errorText(e) }, 'part not cancelled');
    }
  }

  private orchestrator(): Handle {
    return this.actor.local(ORCHESTRATOR_INBOX);
  }

  private netOf(node: string): Handle {
    return this.actor.system.isHere(node) ? this.actor.local(ENSEMBLE_NET_INBOX) : at(ENSEMBLE_NET_INBOX, node);
  }
}

/** The job a part runs as: its spec without what only the ensemble reads. */
export function jobSpecOf(spec: EnsembleSpec, name: string): JobSpecInput {
  const part = spec.parts[name];
  if (!part) throw invalid(`no part named ${name}`);
  const { kind: _kind, restart: _restart, optional: _optional, near: _near, name: jobName, ...job } = part;
  return { ...job, name: jobName ?? `${spec.name}.${name}` };
}

function partCtx(spec: PartSpec, name: string, job: Job, restarts: number): PartCtx {
  return {
    part: name,
    kind: spec.kind,
    optional: spec.optional,
    restartOn: spec.restart.on,
    maxRestarts: spec.restart.max,
    restarts,
    jobId: job.id,
    status: job.status,
    node: job.node,
    // Pending with a node: assigned there before this node restarted, and its start is asked
    // again there (orchestrator recovery), not placed anew; the hosts are granted at once.
    assigned: job.status === 'pending' && job.node !== null,
    ports: spec.ports,
    exclude: job.attempts.filter((a) => a.outcome === 'lost' || a.outcome === 'refused').map((a) => a.node),
    error: job.error,
  };
}

/** The stored status a machine state stands for. */
function stateOf(snapshot: { value: unknown; context: EnsembleContext }): { status: EnsembleStatus; reason: string | null } {
  const { context } = snapshot;
  if (snapshot.value === 'completed') return { status: 'completed', reason: context.reason };
  if (snapshot.value === 'failed') return { status: 'failed', reason: context.reason };
  if (context.ran) return { status: 'running', reason: snapshot.value === 'stopping' ? `stopping: ${context.reason}` : null };
  const waiting = Object.values(context.parts).filter((p) => p.status === 'pending').map((p) => p.part);
  return { status: 'pending', reason: context.reason ?? (waiting.length ? `waiting for ${waiting.join(', ')} to run` : null) };
}
