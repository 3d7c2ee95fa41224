/**
 * How many token signatures that do not verify each sender may make this node check. A forged
 * signature costs its sender nothing and the node one Ed25519 verification; a genuine sender
 * practically never sends one. So each sender (a network peer, or a signing key) has a bucket
 * of `perSecond` failures, refilled at `perSecond` a second; one that overdraws it is refused
 * outright for `refuseS` seconds, before any of its tokens is looked at.
 */
import { rememberNewest } from '../bounded-map.js';

export interface BudgetOptions {
  perSecond: number;
  refuseS: number;
  /** Milliseconds; injectable so that tests need not wait. */
  clock?: () => number;
  /** Senders tracked at once: a flood of fresh peer ids cannot grow memory. */
  capacity?: number;
}

const DEFAULT_CAPACITY = 10_000;

export class FailureBudget {
  private readonly buckets = new Map<string, { left: number; at: number }>();
  private readonly refused = new Map<string, number>();
  private readonly clock: () => number;
  private readonly capacity: number;

  constructor(readonly options: BudgetOptions) {
    this.clock = options.clock ?? Date.now;
    this.capacity = options.capacity ?? DEFAULT_CAPACITY;
  }

  /** Whether `who` is refused now. */
  isRefused(who: string): boolean {
    const until = this.refused.get(who);
    if (until === undefined) return false;
    if (until > this.clock()) return true;
    this.refused.delete(who);
    return false;
  }

  /** Charges `who` for `failures` failed verifications; returns whether that got it refused. */
  spend(who: string, failures: number): boolean {
    const now = this.clock();
    const { perSecond, refuseS } = this.options;
    const b = this.buckets.get(who);
    const left = b ? Math.min(perSecond, b.left + ((now - b.at) / 1000) * perSecond) : perSecond;
    this.buckets.delete(who); // re-inserted last: the map's order is least recently charged first
    if (left - failures >= 0) {
      rememberNewest(this.buckets, who, { left: left - failures, at: now }, this.capacity);
      return false;
    }
    rememberNewest(this.refused, who, now + refuseS * 1000, this.capacity);
    return true;
  }

  /** Senders refused now. */
  refusedNow(): number {
    const now = this.clock();
    let n = 0;
    for (const until of this.refused.values()) if (until > now) n++;
    return n;
  }
}
