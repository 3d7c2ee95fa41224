/**
 * The resource manager actor (inbox `resources`): the machine's capacity, the share of it the
 * operator onboarded, and everything reserved against that share, by allocations (stored, so
 * they survive restarts) and by running jobs (held in memory: a job's reservation lives exactly
 * as long as its run, which the orchestrator re-establishes after a restart). Every check and
 * reservation happens synchronously inside one handler, so two requests can never both take
 * the last of a resource.
 */
import { randomUUID } from 'node:crypto';
import { JobBehaviors, ORCHESTRATOR_INBOX } from '../../behaviors/jobs/jobs.js';
import {
  AllocatePayload,
  AllocationListPayload,
  ConfigurePayload,
  DeallocatePayload,
  type Device,
  DeviceBehaviors,
  EmptyPayload,
  LeasePayload,
  loadOf,
  type Offer,
  ReleasePayload,
  ReservePayload,
  type ReserveReply,
  ResourceBehaviors,
  RESOURCES_INBOX,
  type Usage,
} from '../../behaviors/jobs/resources.js';
import type { Allocation, DeviceSettings, DeviceSettingsChanges, ResourceCapacity, ResourceSpec } from '../../behaviors/jobs/schema.js';
import type { Actor } from '../../runtime/actor.js';
import { defineBehavior } from '../../runtime/behavior.js';
import { type ActorContext, defineActor } from '../../runtime/component.js';
import { DmsError, errorText, invalid } from '../../runtime/errors.js';
import type { Logger } from '../../runtime/log.js';
import type { Storage } from '../../storage/index.js';
import { shareBeyondCapacity } from './capacity.js';
import { fitsWithin, ResourceLedger } from './ledger.js';

export interface ResourceManagerDeps {
  storage: Storage;
  /** What the machine has (measureCapacity). */
  capacity: ResourceCapacity;
  /** The device name until the operator sets one. */
  defaultName: string;
}

const NO_SETTINGS: DeviceSettings = { name: '', location: {}, labels: {}, onboarded: null };

const jobKey = (jobId: string) => `job:${jobId}`;
const allocationKey = (id: string) => `allocation:${id}`;

export const ResourceManagerActor = defineActor({
  inbox: RESOURCES_INBOX,
  // Correctness does not rest on the mailbox: every check and reservation is made synchronously
  // within one handler, and an allocation claims its share before it awaits its write. The
  // handlers that wait (storage) do not hold up the rest.
  concurrency: 'node',
  create: async ({ actor, log, deps }: ActorContext<ResourceManagerDeps>) => {
    // The device settings and the allocations still held, before the first envelope.
    const settings = (await deps.storage.device.get()) ?? NO_SETTINGS;
    const held = await deps.storage.allocations.list({ active: true });
    const manager = new ResourceManager(actor, deps, log, settings, held);
    return { behaviors: manager.behaviors() };
  },
});

class ResourceManager {
  private readonly ledger: ResourceLedger;
  /** Held allocations made for a job, by job id: the job runs on its allocation. */
  private readonly forJobs = new Map<string, Allocation>();
  /** Jobs running on an allocation made for them, rather than on a reservation of their own. */
  private readonly covered = new Set<string>();
  /**
   * Jobs whose share is leased, not started yet. The lease's clock is its deployment machine's
   * (actors/deployment/provider-machine.ts): it releases the share when the lease runs out.
   */
  private readonly leases = new Set<string>();

  constructor(
    private readonly actor: Actor,
    private readonly opts: ResourceManagerDeps,
    private readonly log: Logger,
    private settings: DeviceSettings,
    held: Allocation[],
  ) {
    this.ledger = new ResourceLedger(settings.onboarded ?? opts.capacity);
    // Stored allocations were granted before; a smaller share since then does not revoke them.
    for (const a of held) this.hold(a, true);
  }

  usage(): Usage {
    return {
      capacity: this.opts.capacity,
      onboarded: this.ledger.offering,
      allocated: this.ledger.allocated(),
      free: this.ledger.free(),
      offered: this.settings.onboarded !== null,
    };
  }

  /** What a bid for a job is made from. */
  offer(): Offer {
    const offering = this.ledger.offering;
    const held = this.ledger.allocated();
    return {
      offering,
      free: this.ledger.free(),
      load: loadOf({ cores: held.cpu.cores, memory: held.memory.size }, offering),
      offered: this.settings.onboarded !== null,
      location: this.settings.location,
      labels: this.settings.labels,
    };
  }

  device(): Device {
    return {
      id: this.actor.system.key.did,
      name: this.settings.name || this.opts.defaultName,
      // Online and answering; busy while any job holds resources here.
      status: this.ledger.holders('job:').length > 0 || this.covered.size > 0 ? 'busy' : 'online',
      resources: this.ledger.offering,
      location: this.settings.location,
      labels: this.settings.labels,
      last_seen: new Date().toISOString(),
    };
  }

  behaviors() {
    return [
      defineBehavior({ name: ResourceBehaviors.usage, payload: EmptyPayload, handle: () => this.usage() }),
      defineBehavior({ name: ResourceBehaviors.reserve, payload: ReservePayload, handle: ({ payload }) => this.reserve(payload) }),
      defineBehavior({
        name: ResourceBehaviors.release,
        payload: ReleasePayload,
        handle: async ({ payload }) => ({ released: await this.releaseJobs(payload.job_ids) }),
      }),
      defineBehavior({ name: ResourceBehaviors.offer, payload: EmptyPayload, handle: () => this.offer() }),
      defineBehavior({ name: ResourceBehaviors.lease, payload: LeasePayload, handle: ({ payload }) => this.lease(payload) }),
      defineBehavior({ name: ResourceBehaviors.allocate, payload: AllocatePayload, handle: ({ payload }) => this.allocate(payload) }),
      defineBehavior({
        name: ResourceBehaviors.allocations,
        payload: AllocationListPayload,
        handle: ({ payload }) => this.opts.storage.allocations.list(payload.all ? {} : { active: true }),
      }),
      defineBehavior({ name: ResourceBehaviors.deallocate, payload: DeallocatePayload, handle: ({ payload }) => this.deallocate(payload.id) }),
      defineBehavior({ name: DeviceBehaviors.status, payload: EmptyPayload, handle: () => this.device() }),
      defineBehavior({ name: DeviceBehaviors.configure, payload: ConfigurePayload, handle: ({ payload }) => this.configure(payload) }),
    ];
  }

  // --- jobs ------------------------------------------------------------------------------

  private reserve(request: { jobs: { job_id: string; resources: ResourceSpec }[]; force: boolean }): ReserveReply {
    const reply: ReserveReply = { granted: [], refused: [] };
    for (const { job_id, resources } of request.jobs) {
      // A leased share becomes the job's for as long as it runs.
      this.leases.delete(job_id);
      // Asking again for a job that already holds its share is not asking for more.
      if (this.ledger.has(jobKey(job_id)) || this.covered.has(job_id)) {
        reply.granted.push(job_id);
        continue;
      }
      const own = this.forJobs.get(job_id);
      if (own && fitsWithin(resources, own.resources)) {
        this.covered.add(job_id);
        reply.granted.push(job_id);
        continue;
      }
      const reason = request.force ? null : this.ledger.shortfall(resources);
      if (reason) {
        reply.refused.push({ job_id, reason });
        continue;
      }
      this.ledger.reserve(jobKey(job_id), resources, true);
      reply.granted.push(job_id);
    }
    return reply;
  }

  /** Frees what the jobs hold; an allocation made for one of them ends with it. */
  private async releaseJobs(jobIds: string[]): Promise<number> {
    let released = 0;
    let leased = false;
    const ended: Allocation[] = [];
    for (const id of jobIds) {
      if (this.leases.delete(id)) leased = true;
      if (this.ledger.release(jobKey(id))) released++;
      if (this.covered.delete(id)) {
        const allocation = this.forJobs.get(id)!;
        this.unhold(allocation);
        ended.push(allocation);
        released++;
      }
    }
    // Stored after the fact: were this lost in a crash, the allocation would only stay
    // reserved until released by hand, which errs on the side of never over-committing.
    await Promise.all(ended.map((a) => this.opts.storage.allocations.release(a.id)));
    // A job that ends is followed by the orchestrator's own scheduling; a lease nobody started is not.
    if (leased) this.resourcesFreed();
    return released;
  }

  /**
   * Holds a job's share for its start: the job then reserves it as its own (see reserve), or
   * its deployment releases it. A job may lease once.
   */
  private lease({ job_id, resources }: { job_id: string; resources: ResourceSpec }): { job_id: string } {
    const key = jobKey(job_id);
    if (this.ledger.has(key) || this.covered.has(job_id)) throw new DmsError('conflict', `job ${job_id} already holds its resources here`);
    const short = this.ledger.shortfall(resources);
    if (short) throw new DmsError('conflict', short);
    this.ledger.reserve(key, resources, true);
    this.leases.add(job_id);
    return { job_id };
  }

  // --- allocations -----------------------------------------------------------------------

  private async allocate(request: { resources: ResourceSpec; job_id?: string }): Promise<Allocation> {
    if (request.job_id && this.forJobs.has(request.job_id)) {
      throw new DmsError('conflict', `job ${request.job_id} already has allocation ${this.forJobs.get(request.job_id)!.id}`);
    }
    // Reserved before the write so no other request can take the same resources meanwhile.
    const claim = allocationKey(`claim-${randomUUID()}`);
    this.ledger.reserve(claim, request.resources);
    let allocation: Allocation;
    try {
      allocation = await this.opts.storage.allocations.create(request);
    } finally {
      this.ledger.release(claim);
    }
    this.hold(allocation, true);
    return allocation;
  }

  private async deallocate(id: string): Promise<Allocation> {
    const allocation = await this.opts.storage.allocations.release(id);
    if (this.unhold(allocation)) this.resourcesFreed();
    return allocation;
  }

  private hold(a: Allocation, force: boolean): void {
    this.ledger.reserve(allocationKey(a.id), a.resources, force);
    if (a.job_id) this.forJobs.set(a.job_id, a);
  }

  private unhold(a: Allocation): boolean {
    if (a.job_id && this.forJobs.get(a.job_id)?.id === a.id) {
      this.forJobs.delete(a.job_id);
      this.covered.delete(a.job_id);
    }
    return this.ledger.release(allocationKey(a.id));
  }

  // --- device ----------------------------------------------------------------------------

  private async configure(patch: DeviceSettingsChanges): Promise<DeviceSettings> {
    if (patch.onboarded) this.checkOnboarded(patch.onboarded);
    const next = await this.opts.storage.device.put(patch);
    const grew = next.onboarded === null || !fitsWithin(next.onboarded, this.ledger.offering);
    this.settings = next;
    this.ledger.offer(next.onboarded ?? this.opts.capacity);
    if (grew) this.resourcesFreed();
    return next;
  }

  /** The share offered can be at most what the machine has. */
  private checkOnboarded(share: ResourceSpec): void {
    const over = shareBeyondCapacity(share, this.opts.capacity);
    if (over) throw invalid(over);
  }

  /** Tells the orchestrator that pending jobs may fit now. */
  private resourcesFreed(): void {
    this.actor.tell(this.actor.local(ORCHESTRATOR_INBOX), JobBehaviors.schedule, {}).catch((e: unknown) => {
      this.log.debug({ err: errorText(e) }, 'orchestrator not told about freed resources');
    });
  }
}
