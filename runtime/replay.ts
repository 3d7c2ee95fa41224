import { DmsError, invalid } from './errors.js';
import { nowNs } from './time.js';

export interface ReplayLimits {
  /** Most unexpired entries in all. */
  capacity: number;
  /** Most unexpired entries one untrusted sender (from.id) may hold. */
  perSender: number;
  /**
   * Entries only trusted senders (the node's own keys, its root anchors) may use: many
   * throwaway keys, each within its share, together still cannot lock the operator out.
   * Defaults to a tenth of the capacity.
   */
  reserve?: number;
}

/** Where admitted entries are persisted, so they outlive the process (runtime/replay-log.ts). */
export interface ReplayJournal {
  /** Persists one entry before the cache counts it; throws when it cannot. */
  append(key: string, exp: bigint): void;
  /** Called after each admission with the cache, whose live entries it may rewrite itself from. */
  settle(cache: ReplayCache): void;
  close(): void;
}

const REPLAYED = 'replayed envelope: this (from.id, nonce) was already delivered';

/**
 * Remembers (from.id, nonce) of delivered envelopes until their exp (README "Replay protection").
 * Bounded: when full of unexpired entries it refuses new envelopes (503) rather than forgetting
 * one, since a forgotten entry is a replay window. Entries are recorded before authorization
 * (that happens at dispatch), so the bounds are per sender, with a reserve for trusted senders.
 */
export class ReplayCache {
  readonly capacity: number;
  readonly perSender: number;
  /** Entries untrusted senders may fill together. */
  private readonly openShare: number;
  private readonly seen = new Map<string, bigint>();
  private readonly perFrom = new Map<string, number>();
  // Min-heap of [exp, key, from.id] so expired entries leave in exp order.
  private readonly heap: Array<[bigint, string, string]> = [];

  constructor(
    limits: ReplayLimits | number,
    private readonly journal?: ReplayJournal,
  ) {
    const l = typeof limits === 'number' ? { capacity: limits, perSender: limits, reserve: 0 } : limits;
    this.capacity = l.capacity;
    this.perSender = l.perSender;
    this.openShare = l.capacity - Math.min(l.reserve ?? Math.floor(l.capacity / 10), l.capacity);
  }

  get size(): number {
    return this.seen.size;
  }

  /** Unexpired entries of one sender (as of the last purge). */
  held(fromId: string): number {
    return this.perFrom.get(fromId) ?? 0;
  }

  /**
   * Records the pair, or throws when it was seen before (replay, 400) or the sender's share
   * or the cache is full (503). `trusted` senders may use the reserve and have no per-sender cap.
   */
  admit(fromId: string, nonce: bigint, exp: bigint, now: bigint = nowNs(), trusted = false): void {
    this.purge(now);
    const key = `${fromId} ${nonce}`;
    if (this.seen.has(key)) throw invalid(REPLAYED);
    // Nothing to remember: it could not be delivered anyway (the system refuses it first).
    if (exp <= now) return;
    if (this.seen.size >= (trusted ? this.capacity : this.openShare)) {
      throw new DmsError('overloaded', 'replay cache is full of unexpired envelopes; retry later', { retryAfter: 1 });
    }
    const held = this.perFrom.get(fromId) ?? 0;
    if (!trusted && held >= this.perSender) {
      throw new DmsError(
        'overloaded',
        `sender ${fromId} already holds ${held} unexpired envelopes in the replay cache (actor.replay_per_sender); retry once some expire`,
        { retryAfter: 1 },
      );
    }
    this.journal?.append(key, exp);
    this.insert(key, fromId, exp, held);
    this.journal?.settle(this);
  }

  /** Puts back an entry persisted earlier, outside every bound: it was admitted once already. */
  restore(fromId: string, nonce: bigint, exp: bigint, now: bigint = nowNs()): void {
    const key = `${fromId} ${nonce}`;
    if (exp <= now || this.seen.has(key)) return;
    this.insert(key, fromId, exp, this.perFrom.get(fromId) ?? 0);
  }

  /** The live entries as [key, exp], key being `<from.id> <nonce>` (for the journal's rewrite). */
  entries(now: bigint = nowNs()): IterableIterator<[string, bigint]> {
    this.purge(now);
    return this.seen.entries();
  }

  purge(now: bigint = nowNs()): void {
    const h = this.heap;
    while (h.length && h[0][0] <= now) {
      const [, key, from] = this.pop();
      this.seen.delete(key);
      const left = (this.perFrom.get(from) ?? 1) - 1;
      if (left > 0) this.perFrom.set(from, left);
      else this.perFrom.delete(from);
    }
  }

  close(): void {
    this.journal?.close();
  }

  private insert(key: string, fromId: string, exp: bigint, held: number): void {
    this.seen.set(key, exp);
    this.perFrom.set(fromId, held + 1);
    this.push([exp, key, fromId]);
  }

  private push(item: [bigint, string, string]): void {
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

  private pop(): [bigint, string, string] {
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
