/** The provider's round-trip times (actors/deployment/round-trips.ts): kept a while, one ping per peer at a time, bounded. */
import { describe, expect, it } from 'vitest';
import { RoundTrips } from '../../actors/deployment/round-trips.js';

describe('round trips', () => {
  it('pings a peer once for callers at the same time, and keeps the time a while', async () => {
    let pings = 0;
    const rt = new RoundTrips(async () => (pings++, 1.5), { keepMs: 60_000, maxInFlight: 4, maxKept: 8 });
    expect(await Promise.all([rt.to('p'), rt.to('p'), rt.to('p')])).toEqual([{ ms: 1.5 }, { ms: 1.5 }, { ms: 1.5 }]);
    expect(await rt.to('p')).toEqual({ ms: 1.5 });
    expect(pings).toBe(1);
  });

  it('keeps a failure too, says why, and refuses to measure more peers at once than its bound', async () => {
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    const rt = new RoundTrips(async (peer) => {
      if (peer === 'gone') throw new Error('ping to peer gone failed: no route');
      await gate;
      return 1;
    }, { keepMs: 60_000, maxInFlight: 2, maxKept: 8 });
    expect(await rt.to('gone')).toEqual({ error: 'ping to peer gone failed: no route' });
    const slow = [rt.to('a'), rt.to('b')];
    expect(await rt.to('c')).toEqual({ error: 'this node is measuring 2 round trips already' });
    release();
    expect(await Promise.all(slow)).toEqual([{ ms: 1 }, { ms: 1 }]);
  });

  it('forgets the oldest peers past its bound and measures again once a time is old', async () => {
    let pings = 0;
    const rt = new RoundTrips(async () => ++pings, { keepMs: 0, maxInFlight: 4, maxKept: 2 });
    await rt.to('a');
    await rt.to('a');
    expect(pings).toBe(2);
  });
});
