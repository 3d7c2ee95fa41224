// What a node keeps in memory of the jobs that ended: their states for a follower's last read,
// not what they ran. A job's environment may be as large as a request body (1 MiB): the 256 last
// ended kept whole held 300 MB of a probed node's heap after 300 such jobs, a stranger's
// included, and the process stayed at 1.2 GB.
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { LocalNode } from '../helpers/local-node.js';
import { type JobNodeScene, jobNodeScene, MiB, nullJob, type Rest, startLocalJobNode, until } from './helpers.js';

setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as () => void;

let scene: JobNodeScene<LocalNode> | undefined;
let rest: Rest;

beforeAll(async () => void ({ rest } = scene = await jobNodeScene(startLocalJobNode)));
afterAll(() => scene?.stop());

/** The heap this process holds once the garbage is gone (twice: a collection can leave what the first freed to the next). */
function heldBytes(): number {
  gc();
  gc();
  return process.memoryUsage().heapUsed;
}

describe('jobs that ended', () => {
  it('are not kept whole in memory: 40 jobs of a 900 KB environment each hold far less than their 36 MB', async () => {
    const environment = Object.fromEntries(Array.from({ length: 900 }, (_, i) => [`V${i}`, 'x'.repeat(1000)]));
    // One first: the node's code paths and caches are warm before the measure.
    await rest.waitFor((await rest.submit({ ...nullJob({ name: 'warm' }), environment })).id);
    const before = heldBytes();
    const ids: string[] = [];
    for (let i = 0; i < 40; i++) ids.push((await rest.submit({ ...nullJob({ name: `big-${i}` }), environment })).id);
    await until('all 40 jobs to end', async () => (await Promise.all(ids.map((id) => rest.job(id)))).every((j) => j.status === 'completed'));
    const grown = heldBytes() - before;
    expect(grown / MiB, `the heap grew ${(grown / MiB).toFixed(1)} MiB`).toBeLessThan(12);
    // Still there, in full, where a reader asks for them.
    expect(Object.keys((await rest.job(ids[0])).environment)).toHaveLength(900);
  });
});
