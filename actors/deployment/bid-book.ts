/**
 * The jobs this node bid for lately, by requester: a provider leases only for a job it bid on
 * in the last bid window, to the node that offered it, for at most what it was offered with.
 * Bounded per requester and in all, so offers from one node cannot push out another's.
 */
import type { ResourceSpec } from '../../behaviors/jobs/schema.js';

export interface BidRecord {
  requester: string;
  resources: ResourceSpec;
  at: number;
}

export interface BidBookLimits {
  /** How long after a bid its job may be reserved. */
  validMs: number;
  /** Bids remembered for one requester; its oldest goes first. */
  perRequester: number;
  /** Bids remembered in all; the oldest of the requester with most goes first. */
  total: number;
}

export class BidBook {
  /** Insertion-ordered per requester, so the first entry is the oldest. */
  private readonly byRequester = new Map<string, Map<string, BidRecord>>();
  private readonly byJob = new Map<string, BidRecord>();

  constructor(private readonly limits: BidBookLimits) {}

  get size(): number {
    return this.byJob.size;
  }

  record(jobId: string, requester: string, resources: ResourceSpec, now = Date.now()): void {
    this.forget(jobId);
    let mine = this.byRequester.get(requester);
    if (!mine) this.byRequester.set(requester, (mine = new Map()));
    const bid = { requester, resources, at: now };
    mine.set(jobId, bid);
    this.byJob.set(jobId, bid);
    if (mine.size > this.limits.perRequester) this.forget(mine.keys().next().value!);
    if (this.byJob.size > this.limits.total) this.evictFromLargest();
  }

  /** The bid for `jobId` and how long it stays valid, or null when there is none still valid. */
  take(jobId: string, now = Date.now()): { bid: BidRecord; validMs: number } | null {
    const bid = this.byJob.get(jobId);
    if (!bid) return null;
    const left = bid.at + this.limits.validMs - now;
    if (left <= 0) {
      this.forget(jobId);
      return null;
    }
    return { bid, validMs: left };
  }

  /**
   * What `requester`'s bids of the last `withinMs` would hold here, leaving out the jobs
   * `except` (asked about again): the jobs of one burst its node offered in more than one request.
   */
  recentFor(requester: string, withinMs: number, except: ReadonlySet<string>, now = Date.now()): { cores: number; memory: number } {
    const held = { cores: 0, memory: 0 };
    for (const [jobId, bid] of this.byRequester.get(requester) ?? []) {
      if (bid.at + withinMs <= now || except.has(jobId)) continue;
      held.cores += bid.resources.cpu.cores;
      held.memory += bid.resources.memory.size;
    }
    return held;
  }

  /** Drops every bid past its window. */
  purge(now = Date.now()): void {
    for (const mine of this.byRequester.values()) {
      for (const [jobId, bid] of mine) {
        if (bid.at + this.limits.validMs > now) break;
        this.forget(jobId);
      }
    }
  }

  forget(jobId: string): void {
    const bid = this.byJob.get(jobId);
    if (!bid) return;
    this.byJob.delete(jobId);
    const mine = this.byRequester.get(bid.requester)!;
    mine.delete(jobId);
    if (mine.size === 0) this.byRequester.delete(bid.requester);
  }

  private evictFromLargest(): void {
    let largest: Map<string, BidRecord> | undefined;
    for (const mine of this.byRequester.values()) if (!largest || mine.size > largest.size) largest = mine;
    if (largest) this.forget(largest.keys().next().value!);
  }
}
