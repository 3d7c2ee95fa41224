import { performance } from 'node:perf_hooks';

/*
 * Where node:crypto's Ed25519 runs on the message path, when it is the implementation (where
 * libsodium does not load: ./ed25519.ts; libsodium has no pooled form and, at half OpenSSL's
 * cost, always runs inline). A libuv pool hop adds more latency than the
 * operation itself costs (bench/RESULTS.md, bench:net, has the figures), and pays off only
 * when the event loop has other work to do meanwhile: other envelopes to parse and route while
 * the pool computes. So an operation runs inline unless the loop is busy
 * (over half of the last 50 ms) and it has company: another operation already ran in this
 * turn of the loop, or one is still in the pool. A lone request/reply chain (one caller, one
 * envelope at a time) then stays inline however busy that keeps the loop; a burst spreads
 * over the pool's threads. (Stage timings, runtime/stage-timings.ts, showed the lone chain
 * paying a pool hop per signature check when busy alone decided.)
 */

const SAMPLE_MS = 50;
const BUSY_ABOVE = 0.5;

let busy = false;
let sampler: NodeJS.Timeout | undefined;
let thisTurn = 0;
let inPool = 0;

function startSampling(): void {
  let last = performance.eventLoopUtilization();
  sampler = setInterval(() => {
    const now = performance.eventLoopUtilization();
    busy = performance.eventLoopUtilization(now, last).utilization > BUSY_ABOVE;
    last = now;
  }, SAMPLE_MS);
  sampler.unref();
}

const endTurn = () => {
  thisTurn = 0;
};

function offload(): boolean {
  if (!sampler) startSampling();
  if (thisTurn++ === 0) setImmediate(endTurn);
  return busy && (thisTurn > 1 || inPool > 0);
}

/**
 * Runs one node:crypto Ed25519 operation where it costs least now: `inline` on the event loop,
 * answered synchronously, or `pooled` (node:crypto's callback form, on the libuv pool), answered
 * by a promise.
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
