/**
 * The resource manager actor (inbox `resources`): the machine's capacity, the share of it the
 * operator onboarded, and everything reserved against that share, by allocations (stored, so
 * they survive restarts) and by running jobs (held in memory: a job's reservation lives exactly
 * as long as its run, which the orchestrator re-establishes after a restart). Every check and
 * reservation happens synchronously inside one handler, so two requests can never both take
 * the last of a resource.
 */
import { randomUUID } from 'node:crypto';
import { DISCOVERY_INBOX, DiscoveryBehaviors } from '../../behaviors/discovery.js';
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
  type FreeNow,
  type ReserveReply,
  ResourceBehaviors,
  RESOURCES_INBOX,
  StorageBehaviors,
  type StorageClaim,
  StorageClaimPayload,
  StorageReleasePayload,
  type Usage,
  VolumeBehaviors,
  VolumeCreatePayload,
  VolumeNamePayload,
} from '../../behaviors/jobs/resources.js';
import type { Allocation, DeviceSettings, DeviceSettingsChanges, ResourceCapacity, ResourceSpec } from '../../behaviors/jobs/schema.js';
import type { Actor } from '../../runtime/actor.js';
import { defineBehavior } from '../../runtime/behavior.js';
import { type ActorContext, defineActor } from '../../runtime/component.js';
import { DmsError, errorText, invalid } from '../../runtime/errors.js';
import type { Logger } from '../../runtime/log.js';
import type { Storage } from '../../storage/index.js';
import { formatBytes } from '../../runtime/bytes.js';
import type { Volume, Volumes } from '../../runtime/volumes.js';
import { shareBeyondCapacity } from './capacity.js';
import { fitsWithin, ResourceLedger } from './ledger.js';

export interface ResourceManagerDeps {
  storage: Storage;
  /** What the machine has (measureCapacity). */
  capacity: ResourceCapacity;
  /** The device name until the operator sets one. */
  defaultName: string;
  /** The node's block store: the bytes it holds count against the storage share. */
  blocks?: { readonly bytes: number };
  /** The node's volumes: made and removed here, each holding its size of the storage share. */
  volumes?: Volumes;
  /** What the images the Docker executor pulled hold now, and their bound: told, not held from the share. */
  images?: () => Usage['images'];
}

const NO_SETTINGS: DeviceSettings = { name: '', location: {}, labels: {}, onboarded: null };

const jobKey = (jobId: string) => `job:${jobId}`;
const allocationKey = (id: string) => `allocation:${id}`;
const volumeKey = (name: string) => `volume:${name}`;
const BLOCKS_KEY = 'blocks';
const storageOnly = (size: number): ResourceSpec => ({ cpu: { cores: 0 }, memory: { size: 0 }, storage: { size } });

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
    // So were the volumes, and the blocks are already on disk.
    for (const v of opts.volumes?.list() ?? []) this.ledger.reserve(volumeKey(v.name), storageOnly(v.size), true);
    this.countBlocks();
  }

  /**
   * The blocks held now, as one holder of the share: they change without asking (imports,
   * fetches, retention), so every decision about storage reads them first.
   */
  private countBlocks(): number {
    const held = this.opts.blocks?.bytes ?? 0;
    this.ledger.release(BLOCKS_KEY);
    this.ledger.reserve(BLOCKS_KEY, storageOnly(held), true);
    return held;
  }

  private stored(): Usage['stored'] {
    const sum = (prefix: string) => this.ledger.holders(prefix).reduce((n, k) => n + this.ledger.heldBy(k).storage.size, 0);
    return { blocks: this.countBlocks(), volumes: sum('volume:'), uploads: sum('upload:') };
  }

  usage(): Usage {
    const stored = this.stored();
    return {
      stored,
      images: this.opts.images?.() ?? null,
      capacity: this.opts.capacity,
      onboarded: this.ledger.offering,
      allocated: this.ledger.allocated(),
      free: this.ledger.free(),
      offered: this.settings.onboarded !== null,
    };
  }

  /** What a bid for a job is made from. */
  offer(): Offer {
    this.countBlocks();
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
        handle: async ({ payload }) => ({ released: await this.releaseJobs(payload.job_ids), ...this.freeNow() }),
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
      defineBehavior({ name: StorageBehaviors.claim, payload: StorageClaimPayload, handle: ({ payload }) => this.claim(payload) }),
      defineBehavior({ name: StorageBehaviors.release, payload: StorageReleasePayload, handle: ({ payload }) => ({ released: this.ledger.release(payload.holder) }) }),
      defineBehavior({ name: VolumeBehaviors.list, payload: EmptyPayload, handle: () => this.volumes().list() }),
      defineBehavior({ name: VolumeBehaviors.create, payload: VolumeCreatePayload, handle: ({ payload }) => this.createVolume(payload.name, payload.size) }),
      defineBehavior({ name: VolumeBehaviors.remove, payload: VolumeNamePayload, handle: ({ payload }) => this.removeVolume(payload.name) }),
      defineBehavior({ name: DeviceBehaviors.status, payload: EmptyPayload, handle: () => this.device() }),
      defineBehavior({ name: DeviceBehaviors.configure, payload: ConfigurePayload, handle: ({ payload }) => this.configure(payload) }),
    ];
  }

  // --- jobs ------------------------------------------------------------------------------

  private reserve(request: { jobs: { job_id: string; resources: ResourceSpec }[]; force: boolean }): ReserveReply {
    this.countBlocks();
    const reply: Omit<ReserveReply, keyof FreeNow> = { granted: [], refused: [] };
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
    return { ...reply, ...this.freeNow() };
  }

  /** What is free now, with the ledger's version: the orchestrator's scheduler asks only jobs that may fit it. */
  private freeNow(): FreeNow {
    return { free: this.ledger.free(), offering: this.ledger.offering, version: this.ledger.version };
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
    this.countBlocks();
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
    this.countBlocks();
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

  // --- the node's own content --------------------------------------------------------------

  /** How the share's storage is used, for a refusal to name. */
  private storageText(): string {
    const s = this.stored();
    const offered = this.settings.onboarded !== null ? 'onboarded' : 'on this machine (no share onboarded)';
    return `${formatBytes(this.ledger.offering.storage.size)} ${offered}; blocks hold ${formatBytes(s.blocks)}, volumes ${formatBytes(s.volumes)}`;
  }

  /**
   * Holds storage for an upload while it is written: what it declares when that fits, else as
   * much as is free up to `at_most`. Its blocks count by themselves once written; the claim is
   * released then.
   */
  private claim({ holder, at_most, size }: { holder: string; at_most: number; size?: number }): StorageClaim {
    if (this.ledger.has(holder)) throw new DmsError('conflict', `${holder} already holds storage`);
    this.countBlocks();
    const free = this.ledger.free().storage.size;
    const onboarded = this.ledger.offering.storage.size;
    if (size !== undefined && size > free) {
      throw new DmsError('too_large', `upload of ${formatBytes(size)} is larger than the ${formatBytes(free)} of storage free here (${this.storageText()})`);
    }
    const granted = Math.min(at_most, size ?? free, free);
    if (granted === 0 && size !== 0) throw new DmsError('too_large', `no storage is free here for an upload (${this.storageText()})`);
    this.ledger.reserve(holder, storageOnly(granted), true);
    return { holder, granted, free, onboarded };
  }

  private volumes(): Volumes {
    if (!this.opts.volumes) throw new DmsError('unavailable', 'this node keeps no volumes');
    return this.opts.volumes;
  }

  /** Checked against the free share and made in one step: two creations cannot both take the last of it. */
  private createVolume(name: string, size: number): Volume {
    const volumes = this.volumes();
    this.countBlocks();
    const free = this.ledger.free().storage.size;
    if (size > free) {
      // A node onboarded without disk is the usual cause, and the fix is the operator's to make.
      const none = this.settings.onboarded !== null && this.ledger.offering.storage.size === 0;
      const why = none ? 'this node offers no disk: its operator onboards some with `dms onboard --disk <size>`' : `${formatBytes(free)} free (${this.storageText()})`;
      throw new DmsError('conflict', `volume ${name}: not enough storage: ${formatBytes(size)} asked, ${why}`);
    }
    const volume = volumes.create(name, size);
    this.ledger.reserve(volumeKey(name), storageOnly(size), true);
    return volume;
  }

  private async removeVolume(name: string): Promise<Volume> {
    const volumes = this.volumes();
    await volumes.refuseInUse(name, 'delete');
    const volume = volumes.remove(name);
    if (this.ledger.release(volumeKey(name))) this.resourcesFreed();
    return volume;
  }

  // --- device ----------------------------------------------------------------------------

  private async configure(patch: DeviceSettingsChanges): Promise<DeviceSettings> {
    if (patch.onboarded) this.checkOnboarded(patch.onboarded);
    const next = await this.opts.storage.device.put(patch);
    const grew = next.onboarded === null || !fitsWithin(next.onboarded, this.ledger.offering);
    this.settings = next;
    this.ledger.offer(next.onboarded ?? this.opts.capacity);
    if (grew) this.resourcesFreed();
    // Peers keep this node's profile for a few seconds: told, they ask again on their next read.
    this.actor.tell(this.actor.local(DISCOVERY_INBOX), DiscoveryBehaviors.selfChanged, {}).catch((e: unknown) => {
      this.log.debug({ err: errorText(e) }, 'discovery not told that the settings changed');
    });
    return next;
  }

  /** The share offered can be at most what the machine has. */
  private checkOnboarded(share: ResourceSpec): void {
    const over = shareBeyondCapacity(share, this.opts.capacity);
    if (over) throw invalid(over);
  }

  /** Tells the orchestrator that pending jobs may fit now. */
  private resourcesFreed(): void {
    this.actor.tell(this.actor.local(ORCHESTRATOR_INBOX), JobBehaviors.schedule, { version: this.ledger.version }).catch((e: unknown) => {
      this.log.debug({ err: errorText(e) }, 'orchestrator not told about freed resources');
    });
  }
}
