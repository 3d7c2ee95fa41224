import { afterAll, afterEach, beforeAll } from 'vitest';
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

/** What a test starts beside its node: a foreign peer, a gossiper, a throwaway identity. */
interface Stoppable {
  stop(): unknown;
}

/** One node process for a test file, and the peers its tests start beside it. */
export interface NodeWithPeers {
  /** Started before the file's tests. */
  readonly node: NodeProcess;
  /** Keeps `peer` to be stopped after the file's tests, before the node; returns it. */
  keep<P extends Stoppable>(peer: P): P;
}

/**
 * A node process started before a test file's tests; after them, the peers kept are stopped, then
 * the node, and its home removed. `kill`: the node is killed instead of stopped, so it does not
 * first serve what a flood left it.
 */
export function nodeWithPeers(opts: StartOptions = {}, end: 'stop' | 'kill' = 'stop'): NodeWithPeers {
  let node: NodeProcess | undefined;
  const peers: Stoppable[] = [];
  beforeAll(async () => {
    node = await startNode(opts);
  }, 60_000);
  afterAll(async () => {
    await Promise.all(peers.map((p) => p.stop()));
    if (!node) return;
    if (end === 'kill') await node.kill();
    await node.stop();
    removeHome(node.home);
  });
  return {
    get node() {
      if (!node) throw new Error('the node is started before the tests');
      return node;
    },
    keep: (peer) => (peers.push(peer), peer),
  };
}
