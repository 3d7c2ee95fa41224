import { performance } from 'node:perf_hooks';

/*
 * Where Ed25519 runs on the message path. A libuv pool hop adds more latency (~0.1-0.3 ms on
 * a loaded machine) than the operation costs (~40-60 µs), and pays off only when the event
 * loop has other work to do meanwhile. So crypto runs inline while the loop is mostly idle
 * (one call at a time: lowest latency) and moves to the pool once the loop is busy (many
 * calls: the loop keeps parsing and routing while signatures are computed in parallel).
 */

const SAMPLE_MS = 50;
const BUSY_ABOVE = 0.5;

let busy = false;
let sampler: NodeJS.Timeout | undefined;

function startSampling(): void {
  let last = performance.eventLoopUtilization();
  sampler = setInterval(() => {
    const now = performance.eventLoopUtilization();
    busy = performance.eventLoopUtilization(now, last).utilization > BUSY_ABOVE;
    last = now;
  }, SAMPLE_MS);
  sampler.unref();
}

/** True when crypto should go to the libuv pool rather than run on the event loop. */
export function offloadCrypto(): boolean {
  if (!sampler) startSampling();
  return busy;
}
