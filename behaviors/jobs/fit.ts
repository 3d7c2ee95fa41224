/**
 * Whether a job fits a node, each answer a reason a person can read: what it lacks of a
 * node's resources, where its location or labels differ. The orchestrator asks whether any
 * node could ever hold a job (a job no node could hold would wait forever, so it is refused
 * when submitted); a provider asks whether its free share, location and labels fit an offer.
 */
import { formatBytes } from '../../runtime/bytes.js';
import type { Labels, Location, ResourceCapacity, ResourceSpec } from './schema.js';

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
  if (millicores(want.cpu.cores) > millicores(has.cpu.cores)) return `needs ${want.cpu.cores} core${want.cpu.cores === 1 ? '' : 's'}; ${label} has at most ${has.cpu.cores}`;
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

/** Where `has` differs from the location a job asks for (any case); null when it matches. */
export function locationMismatch(want: Location | undefined, has: Location): string | null {
  if (!want) return null;
  for (const key of ['region', 'country', 'city'] as const) {
    const asked = want[key];
    if (asked !== undefined && asked.toLowerCase() !== (has[key] ?? '').toLowerCase()) {
      return `is not in ${key} ${asked} (${has[key] ? `it is in ${has[key]}` : `its ${key} is not set`})`;
    }
  }
  return null;
}

/** The first label a job asks for that `has` lacks; null when it has them all. */
export function labelMismatch(want: Labels | undefined, has: Labels): string | null {
  if (!want) return null;
  for (const [key, value] of Object.entries(want)) {
    // Own labels only: `toString` is not a label a node has.
    const held = Object.hasOwn(has, key) ? has[key] : undefined;
    if (held !== value) return `lacks label ${key}=${value}${held !== undefined ? ` (has ${key}=${held})` : ''}`;
  }
  return null;
}
