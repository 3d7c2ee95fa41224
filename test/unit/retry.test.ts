import { describe, expect, it } from 'vitest';
import { withRetries } from '../../runtime/retry.js';

/** An attempt that fails with each of `failures` in turn, then answers 'done'; its calls are counted. */
function attempts(failures: Error[]) {
  const calls = { n: 0 };
  const attempt = async () => {
    const e = failures[calls.n++];
    if (e) throw e;
    return 'done';
  };
  return { attempt, calls };
}

const busy = new Error('busy');
const refused = new Error('refused');
const retryable = (e: unknown) => e === busy;

describe('withRetries', () => {
  it('attempts again after each pause while the failure is retryable, and tells each retry', async () => {
    const { attempt, calls } = attempts([busy, busy]);
    const told: number[] = [];
    await expect(withRetries(attempt, { pauses: [0, 1, 1], retryable, onRetry: (_e, n) => told.push(n) })).resolves.toBe('done');
    expect(calls.n).toBe(3);
    expect(told).toEqual([1, 2]);
  });

  it('throws the last failure once the pauses are used up: one attempt more than pauses', async () => {
    const { attempt, calls } = attempts([busy, busy, busy]);
    await expect(withRetries(attempt, { pauses: [0, 0], retryable })).rejects.toBe(busy);
    expect(calls.n).toBe(3);
  });

  it('throws a failure that is not retryable at once', async () => {
    const { attempt, calls } = attempts([busy, refused]);
    await expect(withRetries(attempt, { pauses: [0, 0, 0], retryable })).rejects.toBe(refused);
    expect(calls.n).toBe(2);
  });

  it('makes no further attempt once aborted, and ends a pause under way', async () => {
    const stop = new AbortController();
    stop.abort();
    const first = attempts([busy]);
    await expect(withRetries(first.attempt, { pauses: [0], retryable, signal: stop.signal })).rejects.toBe(busy);
    expect(first.calls.n).toBe(1);
    const pausing = new AbortController();
    const second = attempts([busy, busy]);
    const started = performance.now();
    const run = withRetries(second.attempt, { pauses: [60_000], retryable, signal: pausing.signal, onRetry: () => setTimeout(() => pausing.abort(), 10) });
    // The pause ends with the abort; the attempt after it still runs (it was already decided on).
    await expect(run).rejects.toBe(busy);
    expect(performance.now() - started).toBeLessThan(5_000);
    expect(second.calls.n).toBe(2);
  });
});
