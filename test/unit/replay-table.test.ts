import { describe, expect, it } from 'vitest';
import { ceilDouble, EntryTable, floorDouble, LOAD, type SenderHash, senderHash, senderHex, parseSenderHex } from '../../runtime/replay-table.js';
import { ReplayCache } from '../../runtime/replay.js';

/** A small seeded generator, so a failure replays. */
function rng(seed: number): () => number {
  let s = seed >>> 0;
  return () => {
    s = (Math.imul(s ^ (s >>> 15), 0x2c1b3c6d) + 0x6d2b79f5) >>> 0;
    return s / 4294967296;
  };
}

describe('EntryTable', () => {
  it('agrees with a Map through inserts, growth and expiry in exp order', () => {
    const rand = rng(7);
    const t = new EntryTable(Math.ceil(5000 / LOAD));
    const model = new Map<string, number>();
    const senders: SenderHash[] = Array.from({ length: 40 }, (_, i) => senderHash(`k${i}`));
    let now = 1;
    const gone: number[] = [];
    for (let step = 0; step < 20_000; step++) {
      if (rand() < 0.05) {
        now += Math.floor(rand() * 50);
        gone.length = 0;
        t.expire(now, (_s, _lo, _hi, exp) => gone.push(exp));
        for (const [k, exp] of model) if (exp <= now) model.delete(k);
        // Earliest first.
        expect([...gone].sort((a, b) => a - b)).toEqual(gone);
      }
      const si = Math.floor(rand() * senders.length);
      const lo = Math.floor(rand() * 300);
      const key = `${si} ${lo}`;
      const present = t.has(senders[si], lo, 0);
      expect(present).toBe(model.has(key));
      if (!present && model.size < 5000) {
        const exp = now + 1 + Math.floor(rand() * 400);
        t.insert(senders[si], lo, 0, exp, 0);
        model.set(key, exp);
      }
      expect(t.size).toBe(model.size);
    }
    for (const [k] of model) {
      const [si, lo] = k.split(' ').map(Number);
      expect(t.has(senders[si], lo, 0)).toBe(true);
    }
  });

  it('tells nonces apart in both halves, and senders by their whole hash', () => {
    const t = new EntryTable(64);
    const a = senderHash('a');
    t.insert(a, 1, 2, 10, 0);
    expect(t.has(a, 1, 2)).toBe(true);
    expect(t.has(a, 2, 1)).toBe(false);
    expect(t.has([a[0], a[1], a[2] ^ 1], 1, 2)).toBe(false);
  });
});

describe('stored doubles', () => {
  it('round exp up and now down, so nothing leaves before its exp', () => {
    const big = 1_780_000_000_123_456_789n;
    expect(BigInt(ceilDouble(big))).toBeGreaterThanOrEqual(big);
    expect(BigInt(floorDouble(big))).toBeLessThanOrEqual(big);
    expect(ceilDouble(big) - floorDouble(big)).toBeLessThanOrEqual(256);
    expect(ceilDouble(100n)).toBe(100);
  });

  it('a sender hash survives its hex form', () => {
    const s = senderHash('some sender');
    expect(parseSenderHex(senderHex(s))).toEqual(s);
    expect(parseSenderHex('xyz')).toBeUndefined();
  });
});

describe('ReplayCache memory', () => {
  it('costs a fixed record an entry when full: the figure README "Replay protection" states', () => {
    const capacity = 100_000;
    const c = new ReplayCache({ capacity, perSender: capacity, reserve: 0 });
    // Every entry a sender of its own: the worst case for the sender counts too.
    for (let i = 0; i < capacity; i++) c.admit(`throwaway-${i}`, BigInt(i), 10n ** 12n, 1n);
    expect(c.size).toBe(capacity);
    const perEntry = c.bytes / capacity;
    // 52 B of entry table and 21.3 of sender counts (README "Replay protection").
    expect(perEntry).toBeCloseTo(73.3, 0);
  });
});
