/** The clocks and the budget of partial inbound frames (runtime/network/partial-frames.ts), on fake timers. */
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { PartialFrames, type PartialEnd } from '../../runtime/network/partial-frames.js';

beforeEach(() => vi.useFakeTimers());
afterEach(() => vi.useRealTimers());

function watched(frames: PartialFrames, peer: string) {
  const ends: PartialEnd[] = [];
  return { ends, frame: frames.open(peer, (why) => ends.push(why)) };
}

describe('PartialFrames', () => {
  it('gives up a frame that goes the gap time without a byte', () => {
    const s = watched(new PartialFrames(100, 1_000, 5_000), 'p');
    s.frame.update(10, true);
    vi.advanceTimersByTime(999);
    s.frame.update(20, false);
    vi.advanceTimersByTime(999);
    expect(s.ends).toEqual([]);
    vi.advanceTimersByTime(1);
    expect(s.ends).toEqual(['stalled']);
  });

  it('gives up a frame still arriving a byte at a time at the deadline from its first byte', () => {
    const s = watched(new PartialFrames(100, 1_000, 5_000), 'p');
    s.frame.update(1, true);
    for (let held = 2; held <= 12; held++) {
      vi.advanceTimersByTime(500);
      s.frame.update(held, false);
    }
    expect(s.ends).toEqual(['deadline']);
  });

  it('starts the deadline again for each frame begun, and stops the clocks when none is held', () => {
    const frames = new PartialFrames(100, 1_000, 5_000);
    const s = watched(frames, 'p');
    for (let i = 0; i < 20; i++) {
      s.frame.update(5, true);
      vi.advanceTimersByTime(900);
    }
    s.frame.update(0, true);
    vi.advanceTimersByTime(60_000);
    expect(s.ends).toEqual([]);
    expect(frames.held).toBe(0);
  });

  it('past the budget, ends the largest holding of the peer holding most, not a smaller peer', () => {
    const frames = new PartialFrames(100);
    const honest = watched(frames, 'honest');
    const a = watched(frames, 'flood');
    const b = watched(frames, 'flood');
    honest.frame.update(30, true);
    a.frame.update(40, true);
    b.frame.update(20, true);
    expect(frames.held).toBe(90);
    // The honest peer's frame grows past the budget: the flood (60) holds most, its largest goes.
    honest.frame.update(45, false);
    expect(a.ends).toEqual(['budget']);
    expect(honest.ends).toEqual([]);
    expect(frames.held).toBe(65);
    // An ended stream is no longer counted, whatever it is told after.
    a.frame.update(90, false);
    expect(frames.held).toBe(65);
  });

  it('ends the newcomer itself when it holds most', () => {
    const frames = new PartialFrames(100);
    const small = watched(frames, 'small');
    const big = watched(frames, 'big');
    small.frame.update(10, true);
    big.frame.update(95, true);
    expect(big.ends).toEqual(['budget']);
    expect(small.ends).toEqual([]);
  });

  it('gives back what a closed stream held, and stops its clocks', () => {
    const frames = new PartialFrames(100, 1_000, 5_000);
    const s = watched(frames, 'p');
    s.frame.update(50, true);
    s.frame.close();
    expect(frames.held).toBe(0);
    vi.advanceTimersByTime(10_000);
    expect(s.ends).toEqual([]);
  });
});
