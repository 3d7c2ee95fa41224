import { DmsError, invalid } from './errors.js';
import { nowNs } from './time.js';

/**
 * Remembers (from.id, nonce) of delivered envelopes until their exp (WIRE.md "Delivery rules").
 * Bounded: when full of unexpired entries it refuses new envelopes (503) rather than forgetting
 * one, since a forgotten entry is a replay window.
 */
export class ReplayCache {
  private readonly seen = new Map<string, bigint>();
  // Min-heap of [exp, key] so expired entries leave in exp order.
  private readonly heap: Array<[bigint, string]> = [];

  constructor(readonly capacity: number) {}

  get size(): number {
    return this.seen.size;
  }

  /** Records the pair, or throws when it was seen before (replay) or the cache is full. */
  admit(fromId: string, nonce: bigint, exp: bigint, now: bigint = nowNs()): void {
    const key = `${fromId} ${nonce}`;
    const known = this.seen.get(key);
    if (known !== undefined && known > now) throw invalid('replayed envelope: this (from.id, nonce) was already delivered');
    this.purge(now);
    if (this.seen.size >= this.capacity) {
      throw new DmsError('overloaded', 'replay cache is full of unexpired envelopes; retry later', { retryAfter: 1 });
    }
    this.seen.set(key, exp);
    this.push([exp, key]);
  }

  purge(now: bigint = nowNs()): void {
    const h = this.heap;
    while (h.length && h[0][0] <= now) {
      const [exp, key] = this.pop();
      if (this.seen.get(key) === exp) this.seen.delete(key);
    }
  }

  private push(item: [bigint, string]): void {
    const h = this.heap;
    h.push(item);
    let i = h.length - 1;
    while (i > 0) {
      const p = (i - 1) >> 1;
      if (h[p][0] <= h[i][0]) break;
      [h[p], h[i]] = [h[i], h[p]];
      i = p;
    }
  }

  private pop(): [bigint, string] {
    const h = this.heap;
    const top = h[0];
    const last = h.pop()!;
    if (h.length) {
      h[0] = last;
      let i = 0;
      for (;;) {
        const l = 2 * i + 1;
        const r = l + 1;
        let m = i;
        if (l < h.length && h[l][0] < h[m][0]) m = l;
        if (r < h.length && h[r][0] < h[m][0]) m = r;
        if (m === i) break;
        [h[m], h[i]] = [h[i], h[m]];
        i = m;
      }
    }
    return top;
  }
}
