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

/** A lease a reserve asked of one node, in the order they were granted there. */
interface Granted {
  jobId: string;
  resources: ResourceSpec;
  /** When the node granted it (Date.now(), never before the grant listed before it). */
  at: number;
}

/** One node's leases: those under way, and those granted within the hold, oldest first. */
interface NodeLeases {
  underWay: Map<string, { resources: ResourceSpec }>;
  granted: Granted[];
}

/** Least time between two sweeps for granted leases past their hold. */
const PRUNE_MS = 100;

/**
 * A placement asks `fits` for each bid at every event while it collects answers, and a requester
 * placing hundreds of jobs a second holds as many granted leases per node within the hold: so a
 * bid is checked against the reserves under way (at most those in flight) and the grants since
 * it came, found from the newest back, never against the whole hold's list.
 */
export class OwnLeases {
  private readonly byNode = new Map<string, NodeLeases>();
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
    if (!leases) this.byNode.set(node, (leases = { underWay: new Map(), granted: [] }));
    // The job asked of this node again (placed anew there): the newer ask counts instead. Once a
    // placement, over the few seconds' grants the hold keeps.
    const earlier = leases.granted.findIndex((g) => g.jobId === jobId);
    if (earlier >= 0) leases.granted.splice(earlier, 1);
    const ask = { resources };
    leases.underWay.set(jobId, ask);
    return (granted) => {
      if (leases.underWay.get(jobId) !== ask) return;
      leases.underWay.delete(jobId);
      if (granted) {
        const last = leases.granted.at(-1);
        leases.granted.push({ jobId, resources, at: Math.max(Date.now(), last?.at ?? 0) });
      } else this.dropIfEmpty(node, leases);
    };
  }

  /**
   * Whether `resources` for `jobId` fit in `free`, what `node`'s bid that came at `bidAt` said
   * it had, beside this node's other leases there that the bid may not show: those under way,
   * and those granted after it came.
   */
  fits(node: string, jobId: string, resources: ResourceSpec, free: ResourceSpec, bidAt: number): boolean {
    this.prune();
    const leases = this.byNode.get(node);
    if (!leases) return true;
    const oldest = Date.now() - this.holdMs;
    const others: ResourceSpec[] = [];
    for (const [job, ask] of leases.underWay) if (job !== jobId) others.push(ask.resources);
    const { granted } = leases;
    for (let i = granted.length - 1; i >= 0 && granted[i].at >= bidAt && granted[i].at > oldest; i--) {
      if (granted[i].jobId !== jobId) others.push(granted[i].resources);
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
    const oldest = now - this.holdMs;
    for (const [node, leases] of this.byNode) {
      const { granted } = leases;
      let past = 0;
      while (past < granted.length && granted[past].at <= oldest) past++;
      if (past > 0) granted.splice(0, past);
      this.dropIfEmpty(node, leases);
    }
  }

  private dropIfEmpty(node: string, leases: NodeLeases): void {
    if (leases.underWay.size === 0 && leases.granted.length === 0 && this.byNode.get(node) === leases) this.byNode.delete(node);
  }
}
