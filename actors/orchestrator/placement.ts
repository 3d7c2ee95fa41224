/**
 * Whether a job could ever be placed: not "does it fit what is free now" (the resource
 * manager answers that, and a job that does not fit yet waits), but "is there a node whose
 * whole machine could hold it". A job no node could ever hold would wait forever, so it is
 * refused when submitted instead. Today the only node known here is this one; placement on
 * other nodes will pass their capacities too, and this stays the one place that decides.
 */
import type { ResourceCapacity, ResourceSpec } from '../../behaviors/jobs/schema.js';
import { formatBytes } from '../../runtime/bytes.js';

/** A node the job might go to: what its machine has, and how to name it to a person. */
export interface Candidate {
  /** e.g. "this node", or a peer's name. */
  label: string;
  capacity: ResourceCapacity;
}

/**
 * Why no candidate could ever hold `want`, naming the first resource the first candidate
 * (this node) lacks; null when one could. With no candidates there is nothing to judge by,
 * and the job is let through to wait.
 */
export function whyNoNodeCouldHold(want: ResourceSpec, candidates: readonly Candidate[]): string | null {
  if (candidates.length === 0) return null;
  const reasons = candidates.map((c) => lacks(want, c));
  if (reasons.some((r) => r === null)) return null;
  return `${reasons[0]} (no known node could hold it)`;
}

// Thousandths of a core, as the ledger counts them, so 0.1 + 0.2 compares as people expect.
const millicores = (cores: number) => Math.round(cores * 1000);

/** What `want` needs beyond everything `candidate` has; null when it has enough. */
export function lacks(want: ResourceSpec, { label, capacity: has }: Candidate): string | null {
  if (millicores(want.cpu.cores) > millicores(has.cpu.cores)) return `needs ${want.cpu.cores} cores; ${label} has at most ${has.cpu.cores}`;
  if (want.memory.size > has.memory.size) return `needs ${formatBytes(want.memory.size)} of memory; ${label} has at most ${formatBytes(has.memory.size)}`;
  if (want.storage.size > has.storage.size) return `needs ${formatBytes(want.storage.size)} of storage; ${label} has at most ${formatBytes(has.storage.size)}`;
  const gpu = want.gpu;
  if (!gpu) return null;
  const needs = `needs ${gpu.count} GPU${gpu.count === 1 ? '' : 's'}`;
  if (!has.gpu) return `${needs}; ${label} has none`;
  if (gpu.count > has.gpu.count) return `${needs}; ${label} has at most ${has.gpu.count}`;
  if (gpu.model && !(has.gpu.model ?? '').toLowerCase().includes(gpu.model.toLowerCase())) {
    return `needs a GPU of model ${gpu.model}; ${label} has ${has.gpu.model ?? 'GPUs of unknown model'}`;
  }
  if (gpu.vram !== undefined && has.gpu.vram !== undefined && gpu.vram > has.gpu.vram) {
    return `needs ${formatBytes(gpu.vram)} of memory per GPU; ${label}'s GPUs have ${formatBytes(has.gpu.vram)}`;
  }
  return null;
}
