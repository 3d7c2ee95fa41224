/**
 * A wait with a bound: `work`, or what `late` makes of it once `ms` pass without it settling. The
 * timer goes as soon as `work` settles, so a bound of minutes does not keep its closure for
 * minutes after a quick answer. `work` itself is not stopped: a caller that can abort it passes
 * it a signal of its own.
 */
export interface DeadlineOptions {
  /**
   * The pending bound does not keep the process up (default true). False for a wait that may be
   * all a process has left: a start-up step that never settles is then refused when its bound
   * passes, rather than ending Node with nothing said.
   */
  unref?: boolean;
}

/** `late` answers for the missed bound: return a value to resolve with, or throw to reject with. */
export async function settledWithin<T, L = never>(work: Promise<T>, ms: number, late: () => L, opts: DeadlineOptions = {}): Promise<T | L> {
  let timer: NodeJS.Timeout | undefined;
  const bound = new Promise<L>((resolve, reject) => {
    timer = setTimeout(() => {
      try {
        resolve(late());
      } catch (e) {
        reject(e);
      }
    }, ms);
    if (opts.unref !== false) timer.unref();
  });
  try {
    return await Promise.race([work, bound]);
  } finally {
    clearTimeout(timer);
  }
}
