import { describe, expect, it } from 'vitest';
import { settledWithin } from '../../runtime/deadline.js';

const timers = () => process.getActiveResourcesInfo().filter((r) => r === 'Timeout').length;
const never = new Promise<never>(() => {});

describe('settledWithin', () => {
  it('answers with the work when it settles first, and leaves no timer behind', async () => {
    const before = timers();
    await expect(settledWithin(Promise.resolve(7), 60_000, () => 0)).resolves.toBe(7);
    await expect(settledWithin(Promise.reject(new Error('broke')), 60_000, () => 0)).rejects.toThrow('broke');
    expect(timers()).toBe(before);
  });

  it("answers with what `late` returns once the bound passes", async () => {
    await expect(settledWithin(never, 20, () => 'late')).resolves.toBe('late');
  });

  it('rejects with what `late` throws once the bound passes', async () => {
    await expect(
      settledWithin(never, 20, () => {
        throw new Error('too slow');
      }),
    ).rejects.toThrow('too slow');
  });

  it('keeps the process up only when asked to', async () => {
    const held: NodeJS.Timeout[] = [];
    const real = globalThis.setTimeout;
    globalThis.setTimeout = ((fn: () => void, ms: number) => {
      const t = real(fn, ms);
      held.push(t);
      return t;
    }) as typeof setTimeout;
    try {
      const a = settledWithin(never, 10, () => 1);
      const b = settledWithin(never, 10, () => 2, { unref: false });
      expect(held.map((t) => t.hasRef())).toEqual([false, true]);
      await Promise.all([a, b]);
    } finally {
      globalThis.setTimeout = real;
    }
  });
});
