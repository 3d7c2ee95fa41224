/**
 * The arithmetic of reservations: what is offered, what each holder holds, and whether one
 * more request fits. Pure and synchronous, so the resource manager can check and reserve in
 * one step that no other request can interleave with.
 */
import { type GpuSpec, millicoresOf, type ResourceSpec } from '../../behaviors/jobs/schema.js';
import { formatBytes as bytes } from '../../runtime/bytes.js';
import { DmsError } from '../../runtime/errors.js';

/**
 * Integer units, so that a thousand reservations of 0.1 cores add up to exactly 100 cores
 * and release back to exactly zero.
 */
interface Amounts {
  millicores: number;
  memory: number;
  storage: number;
  gpus: number;
}

const ZERO: Amounts = { millicores: 0, memory: 0, storage: 0, gpus: 0 };

// Rounded up, never to nearest: a request of 1e-10 cores (which reaches the ledger from
// messages whose schema has no floor) holds the floor, not nothing.
const amountsOf = (spec: ResourceSpec): Amounts => ({
  millicores: millicoresOf(spec.cpu.cores),
  memory: spec.memory.size,
  storage: spec.storage.size,
  gpus: spec.gpu?.count ?? 0,
});

const add = (a: Amounts, b: Amounts, sign = 1): Amounts => ({
  millicores: a.millicores + sign * b.millicores,
  memory: a.memory + sign * b.memory,
  storage: a.storage + sign * b.storage,
  gpus: a.gpus + sign * b.gpus,
});

export class ResourceLedger {
  private offered: ResourceSpec;
  private offeredAmounts: Amounts;
  private readonly holds = new Map<string, Amounts>();
  private held: Amounts = ZERO;
  private changes = 0;

  constructor(offered: ResourceSpec) {
    this.offered = offered;
    this.offeredAmounts = amountsOf(offered);
  }

  /** Changes what is offered. What is already held stays held, even if it no longer fits. */
  offer(spec: ResourceSpec): void {
    this.offered = spec;
    this.offeredAmounts = amountsOf(spec);
    this.changes++;
  }

  /** Counts every change of what is free: of two readings of `free()`, the one at the higher version is the newer. */
  get version(): number {
    return this.changes;
  }

  /** What is offered now. */
  get offering(): ResourceSpec {
    return this.offered;
  }

  /** Why `spec` does not fit what is free now, naming the short resource; null when it fits. */
  shortfall(spec: ResourceSpec): string | null {
    const want = amountsOf(spec);
    const free = this.freeAmounts();
    const offered = this.offeredAmounts;
    if (want.millicores > free.millicores) {
      return short('cpu', cores(want.millicores), cores(free.millicores), cores(offered.millicores));
    }
    if (want.memory > free.memory) return short('memory', bytes(want.memory), bytes(free.memory), bytes(offered.memory));
    if (want.storage > free.storage) return short('storage', bytes(want.storage), bytes(free.storage), bytes(offered.storage));
    if (spec.gpu) return gpuShortfall(spec.gpu, this.offered.gpu, free.gpus);
    return null;
  }

  /**
   * Reserves `spec` under `key`; throws a conflict naming the short resource when it does not
   * fit, unless `force` (for holders that already use the resources, e.g. after a restart).
   */
  reserve(key: string, spec: ResourceSpec, force = false): void {
    if (this.holds.has(key)) throw new DmsError('conflict', `${key} already holds resources`);
    if (!force) {
      const reason = this.shortfall(spec);
      if (reason) throw new DmsError('conflict', reason);
    }
    const amounts = amountsOf(spec);
    this.holds.set(key, amounts);
    this.held = add(this.held, amounts);
    this.changes++;
  }

  /** Whether `spec` fits what is free now: shortfall() without the words. */
  fits(spec: ResourceSpec): boolean {
    return within(amountsOf(spec), this.freeAmounts());
  }

  /** Gives back what `key` holds; false when it holds nothing. */
  release(key: string): boolean {
    const amounts = this.holds.get(key);
    if (!amounts) return false;
    this.holds.delete(key);
    this.held = add(this.held, amounts, -1);
    this.changes++;
    return true;
  }

  /** What `key` holds (nothing when it holds nothing). */
  heldBy(key: string): ResourceSpec {
    return this.specOf(this.holds.get(key) ?? ZERO);
  }

  has(key: string): boolean {
    return this.holds.has(key);
  }

  /** Keys of the holders whose key starts with `prefix`. */
  holders(prefix = ''): string[] {
    return [...this.holds.keys()].filter((k) => k.startsWith(prefix));
  }

  allocated(): ResourceSpec {
    return this.specOf(this.held);
  }

  free(): ResourceSpec {
    return this.specOf(this.freeAmounts());
  }

  private freeAmounts(): Amounts {
    const o = this.offeredAmounts;
    const h = this.held;
    // Held can exceed offered after the operator shrank the share: nothing is free then, not less.
    return {
      millicores: Math.max(0, o.millicores - h.millicores),
      memory: Math.max(0, o.memory - h.memory),
      storage: Math.max(0, o.storage - h.storage),
      gpus: Math.max(0, o.gpus - h.gpus),
    };
  }

  private specOf(a: Amounts): ResourceSpec {
    const spec: ResourceSpec = { cpu: { cores: a.millicores / 1000 }, memory: { size: a.memory }, storage: { size: a.storage } };
    if (a.gpus > 0) spec.gpu = { ...this.offered.gpu, count: a.gpus };
    return spec;
  }
}

function gpuShortfall(want: GpuSpec, offered: GpuSpec | undefined, free: number): string | null {
  if (!offered) return 'not enough gpu: this node offers no GPU';
  if (want.model && !(offered.model ?? '').toLowerCase().includes(want.model.toLowerCase())) {
    return `no gpu of model ${want.model}: this node offers ${offered.model ?? 'GPUs of unknown model'}`;
  }
  if (want.vram !== undefined && offered.vram !== undefined && want.vram > offered.vram) {
    return `not enough gpu memory: ${bytes(want.vram)} asked per GPU, this node's GPUs have ${bytes(offered.vram)}`;
  }
  if (want.count > free) return short('gpu', `${want.count} GPUs`, String(free), String(offered.count));
  return null;
}

const short = (resource: string, asked: string, free: string, offered: string) =>
  `not enough ${resource}: ${asked} asked, ${free} free of ${offered} onboarded`;

const cores = (millicores: number) => `${millicores / 1000} core${millicores === 1000 ? '' : 's'}`;

/** An amount of cores as every resource message writes it: in the ledger's rounded-up millicores. */
export const coresText = (n: number): string => cores(millicoresOf(n));

/** Whether `spec`, beside everything `besides` holds, asks for no more than `bound` of every resource. */
export function fitsWithin(spec: ResourceSpec, bound: ResourceSpec, besides: readonly ResourceSpec[] = []): boolean {
  return within(
    besides.reduce((sum, other) => add(sum, amountsOf(other)), amountsOf(spec)),
    amountsOf(bound),
  );
}

/** Whether `a` is no more than `b` of every resource. */
function within(a: Amounts, b: Amounts): boolean {
  return a.millicores <= b.millicores && a.memory <= b.memory && a.storage <= b.storage && a.gpus <= b.gpus;
}
