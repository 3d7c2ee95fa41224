/**
 * A token bucket per key, `burst` at once and refilled at `perSecond`, for whatever a caller may
 * do only so often: REST requests per client (http/limits.ts), DHT messages per peer and per
 * host (network/service-streams.ts). A flood of new keys forgets refilled buckets first, then
 * the oldest: the buckets held are bounded.
 */
export class RateLimiter {
  private readonly buckets = new Map<string, { tokens: number; at: number }>();

  constructor(
    readonly perSecond: number,
    readonly burst: number,
    private readonly maxClients = 100_000,
  ) {}

  /** Takes one token; returns 0 when allowed, else the seconds until one is available. */
  take(key: string, now = Date.now()): number {
    let b = this.buckets.get(key);
    if (!b) {
      if (this.buckets.size >= this.maxClients) this.prune(now);
      b = { tokens: this.burst, at: now };
      this.buckets.set(key, b);
    } else {
      b.tokens = Math.min(this.burst, b.tokens + ((now - b.at) / 1000) * this.perSecond);
      b.at = now;
    }
    if (b.tokens >= 1) {
      b.tokens -= 1;
      return 0;
    }
    return Math.max(1, Math.ceil((1 - b.tokens) / this.perSecond));
  }

  /** Drops buckets that have refilled completely: they hold nothing a new bucket would not. */
  private prune(now: number): void {
    for (const [k, b] of this.buckets) if (b.tokens + ((now - b.at) / 1000) * this.perSecond >= this.burst) this.buckets.delete(k);
    // Still full of active clients: forget the oldest rather than grow without bound.
    while (this.buckets.size >= this.maxClients) this.buckets.delete(this.buckets.keys().next().value!);
  }
}
