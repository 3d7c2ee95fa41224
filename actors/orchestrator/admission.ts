/**
 * Whether the orchestrator takes a job: a spec submitted here, or a job another node placed here.
 * Each check refuses with the field that is wrong (400) or why no node could ever hold it (409);
 * a job taken gets `jobs.default_resources` for the cores or memory it left at 0.
 */
import type { z } from 'zod';
import type { AcceptPayload } from '../../behaviors/jobs/deployment.js';
import { whyNoNodeCouldHold } from '../../behaviors/jobs/fit.js';
import { SubmitPayload } from '../../behaviors/jobs/jobs.js';
import { type Job, type JobSpec, RESOURCE_FLOOR, type ResourceCapacity, type ResourceSpec } from '../../behaviors/jobs/schema.js';
import { DmsError, invalid } from '../../runtime/errors.js';
import { refusedRegistry, refusedRegistryResolved } from './registries.js';

/** The executor whose containers have the engine's memory floor. */
const DOCKER_EXECUTOR = 'docker';

/** `jobs.default_resources` as shipped, for orchestrators built without a config (tests, benches). */
export const DEFAULT_RESOURCES = { cores: 1, memory_bytes: 512 * 1024 * 1024 };

export interface AdmissionOptions {
  /** Executors jobs may name here. */
  runnable: ReadonlySet<string>;
  /** Private registry hosts images may name (`jobs.allowed_registries`). */
  allowedRegistries: readonly string[];
  /** `jobs.default_resources`. */
  defaults: { cores: number; memory_bytes: number };
  isHere(host: string): boolean;
  /** Whether jobs may leave this node now: the remote executor and connected peers (or a pinned node). */
  mayLeave(spec: JobSpec): boolean;
  /** What this machine has, as the resource manager measured it. */
  capacity(): Promise<ResourceCapacity>;
}

export class Admission {
  /** Asked once, as it is fixed for the life of the node; a failed ask is not kept. */
  private capacity: Promise<ResourceCapacity> | null = null;

  constructor(private readonly opts: AdmissionOptions) {}

  /** A spec submitted here, checked: its resources with the defaults filled in. */
  async submitted(spec: JobSpec): Promise<ResourceSpec> {
    // Whether it may go to a node other than this one, which may have what this one lacks.
    const here = spec.placement?.local === true || (spec.placement?.node !== undefined && this.opts.isHere(spec.placement.node));
    const network = !here && this.opts.mayLeave(spec);
    // An executor this node lacks is taken only for a job aimed at other nodes (pinned, or by
    // labels or location): anywhere else it is more likely a typo than a plan.
    const aimed = spec.placement?.node !== undefined || spec.placement?.labels !== undefined || spec.placement?.location !== undefined;
    if (!this.opts.runnable.has(spec.executor) && !(network && aimed)) {
      throw invalid(`executor: no executor named "${spec.executor}" on this node (available: ${[...this.opts.runnable].join(', ')})`);
    }
    const refused = await refusedRegistryResolved(spec.image, this.opts.allowedRegistries);
    if (refused) throw invalid(refused);
    const resources = this.withDefaults(spec.resources, spec.executor);
    // A job that could wait for resources to be freed is accepted; one no machine could ever
    // hold would wait forever. Peers may be bigger: placement then says why none takes it.
    if (!network) {
      const never = whyNoNodeCouldHold(resources, [{ label: 'this node', capacity: await this.machineCapacity() }]);
      if (never) throw new DmsError('conflict', never);
    }
    return resources;
  }

  /** A job another node placed here, checked by this node's own rules. */
  async accepted(spec: z.output<typeof AcceptPayload>['job']): Promise<void> {
    if (!this.opts.runnable.has(spec.executor)) throw invalid(`executor: no executor named "${spec.executor}" on this node`);
    // Looked up here, by the node whose engine would pull: the requester's lookup says nothing
    // about the names of this node's network, and a hostile requester makes none.
    const refused = await refusedRegistryResolved(spec.image, this.opts.allowedRegistries);
    if (refused) throw invalid(refused);
  }

  /**
   * Zero cores or memory gets `jobs.default_resources`: every job is accounted against the
   * onboarded share and runs under limits, whatever it asked for.
   */
  withDefaults(resources: ResourceSpec, executor?: string): ResourceSpec {
    const cores = resources.cpu.cores > 0 ? resources.cpu.cores : this.opts.defaults.cores;
    const asked = resources.memory.size > 0 ? resources.memory.size : this.opts.defaults.memory_bytes;
    // A container gets at least the engine's least: what it runs with is what the ledger holds.
    const size = executor === DOCKER_EXECUTOR ? Math.max(asked, RESOURCE_FLOOR.memoryBytes) : asked;
    return { ...resources, cpu: { cores }, memory: { size } };
  }

  /** Why a stored job may no longer be started (a release that admitted it checked less); null when it may. */
  unstartable(job: Job): string | null {
    const image = SubmitPayload.shape.image.safeParse(job.image);
    if (!image.success) return `image: ${image.error.issues[0].message}`;
    if (job.requester !== null && Object.keys(job.secrets).length > 0) return 'run here for another node, its secrets were kept in memory only (its record holds them redacted) and this node restarted';
    return refusedRegistry(job.image, this.opts.allowedRegistries);
  }

  private machineCapacity(): Promise<ResourceCapacity> {
    this.capacity ??= this.opts.capacity().catch((e: unknown) => {
      this.capacity = null;
      throw e;
    });
    return this.capacity;
  }
}
