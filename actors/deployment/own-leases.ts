/**
 * The leases this node has asked other nodes for, on the requester's side: a bid made before
 * one of them does not show it. Two jobs offered a moment apart (two REST calls, so two offers)
 * can each get the same idle bid from a node with room for one; the first reserves there, and
 * the second, taking the bid for what it says, is refused and waits for the next offer while
 * another node had room (test/multinode/placement.test.ts, "none waits while room is free").
 * So a bid from that node counts as taken every lease this node asked there that is still under
 * way, and every one granted after the bid came (one granted before it, the node counted itself):
 * when the job no longer fits beside them, the placement machine takes the bid for doubtful, as
 * a suspect's (asked after the sure bids, never taken as idle, and waited past while other
 * answers are expected).
 */
import type { ResourceSpec } from '../../behaviors/jobs/schema.js';
import { fitsWithin } from '../resources/ledger.js';

interface Lease {
  resources: ResourceSpec;
  /** When the node granted it (Date.now()); undefined while the reserve is under way. */
  grantedAt?: number;
}

/** Least time between two sweeps for granted leases past their hold. */
const PRUNE_MS = 100;

/** Whether `lease` was granted at `oldest` or before: past its hold, counted against no bid. */
const pastHold = (lease: Lease, oldest: number): boolean => lease.grantedAt !== undefined && lease.grantedAt <= oldest;

export class OwnLeases {
  private readonly byNode = new Map<string, Map<string, Lease>>();
  private pruned = Number.NEGATIVE_INFINITY;

  /**
   * @param holdMs how long a granted lease is kept for the bids that came before it: long
   *   enough that none of them is still being ranked.
   */
  constructor(private readonly holdMs: number) {}

  /** A reserve of `resources` for `jobId` asked of `node`; call the result with whether it was granted. */
  asking(node: string, jobId: string, resources: ResourceSpec): (granted: boolean) => void {
    this.prune();
    let leases = this.byNode.get(node);
    if (!leases) this.byNode.set(node, (leases = new Map()));
    const lease: Lease = { resources };
    leases.set(jobId, lease);
    return (granted) => {
      if (leases.get(jobId) !== lease) return;
      if (granted) lease.grantedAt = Date.now();
      else this.forget(node, jobId);
    };
  }

  /**
   * Whether `resources` for `jobId` fit in `free`, what `node`'s bid that came at `bidAt` said
   * it had, beside this node's other leases there that the bid may not show: those under way,
   * and those granted after it came.
   */
  fits(node: string, jobId: string, resources: ResourceSpec, free: ResourceSpec, bidAt: number): boolean {
    this.prune();
    const oldest = Date.now() - this.holdMs;
    const others: ResourceSpec[] = [];
    for (const [job, lease] of this.byNode.get(node) ?? []) {
      if (job !== jobId && !pastHold(lease, oldest) && (lease.grantedAt ?? bidAt) >= bidAt) others.push(lease.resources);
    }
    return others.length === 0 || fitsWithin(resources, free, others);
  }

  /** Nodes with a lease counted now (for tests). */
  get nodes(): number {
    return this.byNode.size;
  }

  /**
   * Drops granted leases past their hold: only the last few seconds' are kept, so there are few.
   * A placement asks `fits` several times for each bid: the sweep runs at most once a PRUNE_MS.
   */
  private prune(): void {
    const now = Date.now();
    if (now - this.pruned < PRUNE_MS) return;
    this.pruned = now;
    for (const [node, leases] of this.byNode) for (const [job, lease] of leases) if (pastHold(lease, now - this.holdMs)) this.forget(node, job);
  }

  private forget(node: string, jobId: string): void {
    const leases = this.byNode.get(node);
    leases?.delete(jobId);
    if (leases?.size === 0) this.byNode.delete(node);
  }
}
