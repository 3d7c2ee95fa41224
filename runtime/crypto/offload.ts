import { type EventLoopUtilization, performance } from 'node:perf_hooks';

/*
 * Where an Ed25519 operation on the message path runs: inline on the event loop, or off it (a
 * libsodium check on the verify thread, ./verify-thread.ts; node:crypto's operations on the
 * libuv pool, where libsodium does not load: ./ed25519.ts). A hop off the loop adds more latency
 * than the operation itself costs (bench/RESULTS.md, bench:net, has the figures), and pays off
 * only when the event loop has other work to do meanwhile: other envelopes to parse and route
 * while another core computes. So an operation runs inline unless the loop is busy (over half of
 * the last 50 ms) and it has company: another operation already ran in this turn of the loop;
 * and while one is off the loop, every later one goes there too (see offload). A lone
 * request/reply chain (one caller, one envelope at a time) then stays inline however busy that
 * keeps the loop; a burst spreads over the other cores. (Stage timings,
 * runtime/stage-timings.ts, showed the lone chain paying a pool hop per signature check when
 * busy alone decided.)
 */

const SAMPLE_MS = 50;
const BUSY_ABOVE = 0.5;

let busy = false;
let sampled: { elu: EventLoopUtilization; at: number } | undefined;
let thisTurn = 0;
let inPool = 0;

/** Whether the loop was busy over the last SAMPLE_MS or so, sampled when asked (no timer wakes an idle node). */
function loopBusy(): boolean {
  const at = performance.now();
  if (!sampled || at - sampled.at >= SAMPLE_MS) {
    const elu = performance.eventLoopUtilization();
    if (sampled) busy = performance.eventLoopUtilization(elu, sampled.elu).utilization > BUSY_ABOVE;
    sampled = { elu, at };
  }
  return busy;
}

const endTurn = () => {
  thisTurn = 0;
};

function offload(): boolean {
  if (thisTurn++ === 0) setImmediate(endTurn);
  // Once one is off the loop the next follows it there, so checks of one peer's envelopes end in
  // the order they arrived (the verify thread answers in order; an inline one would overtake).
  if (inPool > 0) return true;
  return thisTurn > 1 && loopBusy();
}

/**
 * Runs one Ed25519 operation where it costs least now: `inline` on the event loop, answered
 * synchronously, or `pooled` (another thread: the verify thread, or node:crypto's callback form
 * on the libuv pool), answered by a promise.
 */
export function runCrypto<T>(inline: () => T, pooled: (done: (err: Error | null, result: T) => void) => void): T | Promise<T> {
  if (!offload()) return inline();
  inPool++;
  return new Promise<T>((resolve, reject) =>
    pooled((err, result) => {
      inPool--;
      if (err) reject(err);
      else resolve(result);
    }),
  );
}
