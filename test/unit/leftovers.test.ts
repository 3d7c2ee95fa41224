import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { Leftovers, MAX_LEFTOVERS } from '../../actors/executors/leftovers.js';

const retry = { firstMs: 1_000, maxMs: 4_000 };

describe('containers the engine did not remove (actors/executors/leftovers.ts)', () => {
  beforeEach(() => vi.useFakeTimers());
  afterEach(() => vi.useRealTimers());

  it('asks again after the first wait, then at twice the wait while the engine refuses, up to the bound, and at the first wait once it answered', async () => {
    const asked: number[] = [];
    let refuse = true;
    const leftovers = new Leftovers(async () => {
      asked.push(Date.now());
      if (refuse) throw new Error('the Docker engine did not answer');
    }, undefined, retry);
    const t0 = Date.now();
    leftovers.owe('c1', 'j1');
    for (let i = 0; i < 5; i++) await vi.advanceTimersToNextTimerAsync();
    expect(asked.map((t) => t - t0)).toEqual([1_000, 3_000, 7_000, 11_000, 15_000]);
    expect(leftovers.list()).toEqual(['c1']);
    refuse = false;
    await vi.advanceTimersToNextTimerAsync();
    expect(leftovers.list()).toEqual([]);
    // Nothing owed: no timer is left.
    expect(vi.getTimerCount()).toBe(0);
    leftovers.owe('c2', 'j2');
    await vi.advanceTimersByTimeAsync(retry.firstMs);
    expect(leftovers.list()).toEqual([]);
  });

  it('stops a round at the first refusal, keeps the newest MAX_LEFTOVERS, and forgets one removed meanwhile', async () => {
    const asked: string[] = [];
    const leftovers = new Leftovers(async (id) => {
      asked.push(id);
      if (id === 'c3') throw new Error('refused');
    }, undefined, retry);
    for (let i = 0; i < MAX_LEFTOVERS + 2; i++) leftovers.owe(`c${i}`, `j${i}`);
    expect(leftovers.list()).toHaveLength(MAX_LEFTOVERS);
    expect(leftovers.list()[0]).toBe('c2');
    leftovers.paid('c2');
    await vi.advanceTimersToNextTimerAsync();
    expect(asked).toEqual(['c3']);
    expect(leftovers.list()[0]).toBe('c3');
    leftovers.close();
    expect(vi.getTimerCount()).toBe(0);
    leftovers.owe('late', 'j');
    expect(leftovers.list()).not.toContain('late');
  });
});
