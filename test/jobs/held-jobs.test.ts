// What a node holds in memory of its jobs. Of those that ended, their states for a follower's
// last read, not what they ran: a job's environment may be as large as a request body (1 MiB),
// and the 256 last ended kept whole held 300 MB of a probed node's heap after 300 such jobs, a
// stranger's included. Of those not ended, a bounded number and size (actors/orchestrator/unfinished.ts).
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { LocalNode } from '../helpers/local-node.js';
import { type JobNodeScene, jobNodeScene, MiB, nullJob, type Rest, startLocalJobNode, until } from './helpers.js';

setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as () => void;

let scene: JobNodeScene<LocalNode> | undefined;
let rest: Rest;
let bounded: JobNodeScene<LocalNode> | undefined;

beforeAll(async () => {
  ({ rest } = scene = await jobNodeScene(startLocalJobNode));
  bounded = await jobNodeScene(() => startLocalJobNode({ jobs: { max_unfinished: 5, max_unfinished_bytes: 100_000 } }));
});
afterAll(async () => {
  await scene?.stop();
  await bounded?.stop();
});

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

describe('jobs not yet ended', () => {
  it('are bounded in number and in the bytes of what they run: a submission past either is refused (503), and taken once one ends', async () => {
    const at = bounded!.rest;
    // One job holds every core, so the others wait, pending, for as long as the test needs.
    const { body: usage } = await at.get('/api/v1/resources/usage');
    const hog = await at.submit(nullJob({ name: 'hog', durationMs: 600_000, cores: usage.free.cpu.cores }));
    await at.waitFor(hog.id, ['running']);
    const waiting = () => nullJob({ name: 'waits', cores: 1 });
    const large = { ...waiting(), environment: { BIG: 'x'.repeat(60_000) } };
    expect((await at.post('/api/v1/jobs', large)).status).toBe(201);
    const over = await at.post<{ error: string }>('/api/v1/jobs', large);
    expect(over.status).toBe(503);
    expect(over.body.error).toMatch(/^the jobs this node holds that have not ended run 58\.\d+ KiB of commands, environments and secrets; this one's 58\.\d+ KiB more would pass 97\.\d+ KiB \(jobs\.max_unfinished_bytes\); submit again once some end$/);
    const small: string[] = [];
    for (let i = 0; i < 3; i++) small.push((await at.submit(waiting())).id);
    const full = await at.post<{ error: string }>('/api/v1/jobs', waiting());
    expect(full).toMatchObject({ status: 503, body: { error: 'this node holds 5 jobs that have not ended, its bound (jobs.max_unfinished); submit again once some end' } });
    expect((await at.delete(`/api/v1/jobs/${small[0]}`)).status).toBe(200);
    expect((await at.post('/api/v1/jobs', waiting())).status).toBe(201);
  });
});
