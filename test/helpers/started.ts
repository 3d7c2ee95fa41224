import { afterAll, afterEach } from 'vitest';
import { type NodeProcess, removeHome, startNode, type StartOptions, type TestNode } from './node.js';

/**
 * A `start` for a test file that starts nodes as it goes: each start merges `base` under its own
 * config, and every node started is stopped and its home removed after each test or after the
 * file (`when`). `start` is startNode (a process each) or startLocalNode (in process). Kept apart from node.ts, which benches import without vitest.
 */
export function nodeStarter<N extends TestNode = NodeProcess>(
  base: Record<string, unknown> = {},
  when: 'each' | 'all' = 'all',
  start: (opts: StartOptions) => Promise<N> = startNode as unknown as (opts: StartOptions) => Promise<N>,
): (opts?: StartOptions) => Promise<N> {
  const started: N[] = [];
  (when === 'each' ? afterEach : afterAll)(async () => {
    for (const n of started.splice(0)) {
      await n.stop();
      removeHome(n.home);
    }
  });
  return async (opts: StartOptions = {}) => {
    const config = opts.config === undefined && Object.keys(base).length === 0 ? undefined : { ...base, ...(opts.config as object | undefined) };
    const n = await start(config === undefined ? opts : { ...opts, config });
    started.push(n);
    return n;
  };
}
