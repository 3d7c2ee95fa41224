/**
 * A node with nothing to do sleeps. Found by tracing an idle node's event loop: it woke every
 * 10 ms (epoll_wait with a 10 ms timeout, about 108 times a second), the timer of the event-loop
 * delay histogram behind /metrics' `dms_nodejs_eventloop_lag_*` (prom-client samples the delay at
 * that resolution by default). On a device that runs a node all day that is a core never let
 * idle and a battery drained for a figure sampled every 10 ms. The histogram now samples once a
 * second, and the series are still there.
 *
 * Counted from outside, as the kernel counts it: each time the node's main thread goes to sleep
 * waiting for something is one voluntary context switch (/proc/<pid>/task/<pid>/status).
 */
import { readFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type NodeProcess, removeHome, startNode } from '../helpers/node.js';

/** Well above what an idle node's own timers need (about 10 a second) and well below the 100 a 10 ms timer makes. */
const MOST_WAKEUPS_PER_S = 30;
/** Start-up's own work (the first database pages, the network's first dials) is over by then. */
const SETTLE_MS = 2_000;
const WINDOW_MS = 4_000;

const sleeps = (pid: number): number => Number(/^voluntary_ctxt_switches:\s+(\d+)$/m.exec(readFileSync(`/proc/${pid}/task/${pid}/status`, 'utf8'))![1]);
const pause = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe('an idle node', { timeout: 60_000 }, () => {
  let node: NodeProcess;
  beforeAll(async () => {
    node = await startNode();
  }, 45_000);
  afterAll(async () => {
    await node?.stop();
    if (node) removeHome(node.home);
  });

  it.runIf(process.platform === 'linux')('wakes its main thread a few times a second, not every 10 ms', async () => {
    await pause(SETTLE_MS);
    const before = sleeps(node.pid);
    await pause(WINDOW_MS);
    const perSecond = (sleeps(node.pid) - before) / (WINDOW_MS / 1000);
    expect(perSecond, `the idle node's main thread woke ${perSecond} times a second`).toBeLessThanOrEqual(MOST_WAKEUPS_PER_S);
  });

  it('still reports the event loop delay on /metrics', async () => {
    const text = await (await fetch(`${node.url}/metrics`)).text();
    expect(text).toMatch(/^dms_nodejs_eventloop_lag_p99_seconds \d/m);
    expect(text).toMatch(/^dms_nodejs_eventloop_lag_max_seconds \d/m);
  });
});
