import { afterEach, describe, expect, it, vi } from 'vitest';
import { OwnLeases } from '../../actors/deployment/own-leases.js';
import type { ResourceSpec } from '../../behaviors/jobs/schema.js';

/*
 * The requester's count of the leases it asked other nodes for (actors/deployment/own-leases.ts),
 * which a bid that came before them does not show: what the placement machine's `fits` asks.
 */
const MIB = 1024 * 1024;
const spec = (memoryMib: number, cores = 0.1): ResourceSpec => ({ cpu: { cores }, memory: { size: memoryMib * MIB }, storage: { size: 0 } }) as ResourceSpec;
const oneGib = spec(1024, 4);

afterEach(() => vi.useRealTimers());

describe('own leases', () => {
  it('a reserve under way counts against the node for every other job, not for its own', () => {
    const own = new OwnLeases(2_000);
    own.asking('node-2', 'job-a', spec(600));
    const now = Date.now();
    expect(own.fits('node-2', 'job-b', spec(600), oneGib, now)).toBe(false);
    expect(own.fits('node-2', 'job-b', spec(400), oneGib, now)).toBe(true);
    expect(own.fits('node-2', 'job-a', spec(600), oneGib, now)).toBe(true);
    expect(own.fits('node-3', 'job-b', spec(600), oneGib, now)).toBe(true);
  });

  it('counts every resource: cores too', () => {
    const own = new OwnLeases(2_000);
    own.asking('node-2', 'job-a', spec(10, 3.5));
    expect(own.fits('node-2', 'job-b', spec(10, 1), oneGib, Date.now())).toBe(false);
    expect(own.fits('node-2', 'job-b', spec(10, 0.5), oneGib, Date.now())).toBe(true);
  });

  it('a refused reserve stops counting at once', () => {
    const own = new OwnLeases(2_000);
    const answered = own.asking('node-2', 'job-a', spec(600));
    answered(false);
    expect(own.fits('node-2', 'job-b', spec(600), oneGib, Date.now())).toBe(true);
    expect(own.nodes).toBe(0);
  });

  it('a granted lease counts against the bids that came before the grant, not those after: the node counted it in those', () => {
    vi.useFakeTimers();
    const own = new OwnLeases(2_000);
    const answered = own.asking('node-2', 'job-a', spec(600));
    const before = Date.now();
    vi.advanceTimersByTime(5);
    answered(true);
    vi.advanceTimersByTime(5);
    const after = Date.now();
    expect(own.fits('node-2', 'job-b', spec(600), oneGib, before)).toBe(false);
    expect(own.fits('node-2', 'job-b', spec(600), oneGib, after)).toBe(true);
  });

  it('a reserve under way counts until it is answered, however long that takes, then for the hold', () => {
    vi.useFakeTimers();
    const own = new OwnLeases(2_000);
    const answered = own.asking('node-2', 'job-a', spec(600));
    const bidAt = Date.now();
    vi.advanceTimersByTime(60_000);
    expect(own.fits('node-2', 'job-b', spec(600), oneGib, Date.now())).toBe(false);
    answered(true);
    vi.advanceTimersByTime(1_999);
    expect(own.fits('node-2', 'job-b', spec(600), oneGib, bidAt)).toBe(false);
    vi.advanceTimersByTime(1);
    expect(own.fits('node-2', 'job-b', spec(600), oneGib, bidAt)).toBe(true);
    // Swept at the next look a tenth of a second on.
    vi.advanceTimersByTime(100);
    own.fits('node-2', 'job-b', spec(600), oneGib, bidAt);
    expect(own.nodes).toBe(0);
  });

  it('forgets granted leases past the hold on every node when asked again, so it holds only the recent ones', () => {
    vi.useFakeTimers();
    const own = new OwnLeases(2_000);
    for (let i = 0; i < 100; i++) own.asking(`node-${i}`, `job-${i}`, spec(1))(true);
    expect(own.nodes).toBe(100);
    vi.advanceTimersByTime(2_000);
    own.asking('node-x', 'job-x', spec(1));
    expect(own.nodes).toBe(1);
  });

  it('a job asked of the same node again counts once: the newer ask replaces its earlier grant', () => {
    vi.useFakeTimers();
    const own = new OwnLeases(2_000);
    const bidAt = Date.now();
    own.asking('node-2', 'job-a', spec(600))(true);
    own.asking('node-2', 'job-a', spec(300));
    // 300 under way, not 600 + 300: a job of 600 fits beside it in 1 GiB.
    expect(own.fits('node-2', 'job-b', spec(600), oneGib, bidAt)).toBe(true);
    expect(own.fits('node-2', 'job-b', spec(800), oneGib, bidAt)).toBe(false);
  });

  it('of many grants, counts against a bid those since it came, however many the hold keeps', () => {
    vi.useFakeTimers();
    const own = new OwnLeases(2_000);
    for (let i = 0; i < 500; i++) {
      own.asking('node-2', `job-${i}`, spec(1))(true);
      vi.advanceTimersByTime(1);
    }
    const bidAt = Date.now();
    for (let i = 500; i < 510; i++) own.asking('node-2', `job-${i}`, spec(100))(true);
    // The ten since the bid (1,000 MiB) leave no room for 100 more; the 500 before it do not count.
    expect(own.fits('node-2', 'job-x', spec(24), oneGib, bidAt)).toBe(true);
    expect(own.fits('node-2', 'job-x', spec(25), oneGib, bidAt)).toBe(false);
    // A bid from before them all counts every grant still within the hold.
    expect(own.fits('node-2', 'job-x', spec(24), oneGib, bidAt - 1_000)).toBe(false);
  });
});
