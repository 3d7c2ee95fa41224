import { setTimeout as sleep } from 'node:timers/promises';

export interface RetryOptions {
  /** The pause before each further attempt, in order (0: at once); their count bounds the attempts. */
  pauses: readonly number[];
  /** Whether a failure is worth another attempt; any other is thrown at once. */
  retryable: (e: unknown) => boolean;
  /** Once aborted, no further attempt is made (and a pause under way ends). */
  signal?: AbortSignal;
  /** Told of each failure that is tried again, and which attempt that was (1 for the first). */
  onRetry?: (e: unknown, attempt: number) => void;
}

/**
 * `attempt`'s result, attempted again after each pause while it fails in a way `retryable`
 * accepts. The failure that ends it (not retryable, the pauses used up, or aborted) is thrown.
 */
export async function withRetries<T>(attempt: () => Promise<T>, opts: RetryOptions): Promise<T> {
  for (let n = 0; ; n++) {
    try {
      return await attempt();
    } catch (e) {
      const pause = opts.pauses[n];
      if (pause === undefined || !opts.retryable(e) || opts.signal?.aborted) throw e;
      opts.onRetry?.(e, n + 1);
      if (pause > 0) await sleep(pause, undefined, { signal: opts.signal }).catch(() => undefined);
    }
  }
}
