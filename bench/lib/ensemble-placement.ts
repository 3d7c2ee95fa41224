/**
 * Part (c) of bench:tunnel: how long a 2-part ensemble takes to be placed on 2 nodes, against a
 * single job placed on the other node the same way, in the same run (issue 24: p50 <= 100 ms).
 *
 * Two node processes on loopback (test/helpers startCluster, the built CLI, null executor): each
 * node has its own event loop, as on a real network, so the requester's and the provider's work
 * do not queue behind each other the way two in-process nodes' would.
 *  - ensemble: part `one` pinned to node 1 (the requester), part `two` pinned to node 2.
 *  - job: one job pinned to node 2 (`placement.node`), the same resources.
 * One at a time, each waited for to end before the next is submitted. Timing uses the
 * requester's own stored stamps, so the polling that waits adds nothing to the figure: submit is
 * the ensemble's (the job's) `created_at`; running is the latest pending → running transition of
 * its part jobs (the job's own), read from `/jobs/{id}/events`. Stamps are whole milliseconds.
 */
import { DmsClient } from '../../client/client.js';
import type { Job } from '../../behaviors/jobs/schema.js';
import { startCluster, stopCluster } from '../../test/helpers/network.js';
import type { NodeProcess } from '../../test/helpers/node.js';
import { call } from './api.js';

const TARGET_P50_MS = 100;


const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const quantile = (sorted: number[], q: number) => sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))]!;

/** When job `id` went from pending to running, by the requester's clock (ms since the epoch). */
async function runningAt(node: NodeProcess, id: string): Promise<number> {
  const { events } = (await call(node, 'GET', `/jobs/${id}/events`)) as { events: { at: string; from: string | null; to: string }[] };
  const running = events.find((e) => e.from === 'pending' && e.to === 'running');
  if (!running) throw new Error(`job ${id} never ran`);
  return Date.parse(running.at);
}

/** Polls `read` every 2 ms until `done` says so (at most 30 s). */
async function until<T>(read: () => Promise<T>, done: (v: T) => boolean, what: string): Promise<T> {
  const deadline = Date.now() + 30_000;
  for (;;) {
    const v = await read();
    if (done(v)) return v;
    if (Date.now() > deadline) throw new Error(`${what} did not happen within 30 s: ${JSON.stringify(v)}`);
    await sleep(2);
  }
}

const part = (node: string) => ({ image: 'none', executor: 'null', resources: { cpu: 0.25, memory: '16MiB' }, placement: { node } });

/** Submit → every part running, for one ensemble; it is waited for to complete. */
async function oneEnsemble(requester: NodeProcess, provider: NodeProcess, i: number): Promise<number> {
  const made = await call(requester, 'POST', '/ensembles', { name: `bench${i}`, parts: { one: part(requester.peerId), two: part(provider.peerId) } });
  const ended = await until(() => call(requester, 'GET', `/ensembles/${made.id}`), (e: any) => e.status === 'completed' || e.status === 'failed', 'ensemble completed');
  if (ended.status !== 'completed') throw new Error(`ensemble ${made.id} ${ended.status}: ${ended.reason}`);
  const nodes = Object.fromEntries(ended.parts.map((p: any) => [p.part, p.node]));
  if (nodes.one !== requester.peerId || nodes.two !== provider.peerId) throw new Error(`ensemble ${made.id} not on both nodes: ${JSON.stringify(nodes)}`);
  const running = await Promise.all(ended.parts.map((p: any) => runningAt(requester, p.job_id)));
  return Math.max(...running) - Date.parse(made.created_at);
}

/** Submit → running for one job pinned to the provider; it is waited for to end. */
async function oneJob(requester: NodeProcess, provider: NodeProcess, i: number): Promise<number> {
  const job = (await call(requester, 'POST', '/jobs', { ...part(provider.peerId), name: `bench${i}` })) as Job;
  const ended = await until(() => call(requester, 'GET', `/jobs/${job.id}`) as Promise<Job>, (j) => j.status === 'completed' || j.status === 'failed', 'job ended');
  if (ended.status !== 'completed' || ended.node !== provider.peerId) throw new Error(`job ${job.id} ${ended.status} on ${ended.node}: ${ended.error}`);
  return (await runningAt(requester, job.id)) - Date.parse(job.created_at);
}

const summary = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  return { p50: quantile(s, 0.5), p90: quantile(s, 0.9), p99: quantile(s, 0.99) };
};

export interface EnsemblePlacementResult {
  ensemble: { p50: number; p90: number; p99: number };
  job: { p50: number; p90: number; p99: number };
}

/** Runs (c) on a cluster of its own: `n` of each, alternated, after `warmup` of each. */
export async function ensemblePlacement(n: number, warmup: number): Promise<EnsemblePlacementResult> {
  const nodes = await startCluster(2);
  try {
    const [requester, provider] = nodes as [NodeProcess, NodeProcess];
    for (const node of nodes) await call(node, 'PUT', '/device/config', { onboarded: { cpu: 1, memory: '1GiB' } });
    // The requester must see the provider before a part can be pinned there.
    const client = new DmsClient({ url: requester.url, timeoutMs: 5_000 });
    await until(() => client.peers().catch(() => [] as string[]), (peers) => peers.includes(provider.peerId), 'provider seen');
    for (let i = 0; i < warmup; i++) {
      await oneEnsemble(requester, provider, i);
      await oneJob(requester, provider, i);
    }
    const ensembles: number[] = [];
    const jobs: number[] = [];
    // Alternated, so a spell of load on the shared machine falls on both.
    for (let i = 0; i < n; i++) {
      ensembles.push(await oneEnsemble(requester, provider, i));
      jobs.push(await oneJob(requester, provider, i));
    }
    const result = { ensemble: summary(ensembles), job: summary(jobs) };
    const line = (s: { p50: number; p90: number; p99: number }) => `p50 ${s.p50} ms   p90 ${s.p90} ms   p99 ${s.p99} ms`;
    console.log(`\n(c) placement, null executor, 2 node processes, ${n} of each alternated after ${warmup} warm-up (requester's stamps, whole ms)`);
    console.log(`  2-part ensemble (one part per node)   ${line(result.ensemble)}`);
    console.log(`  one job on the other node              ${line(result.job)}`);
    console.log(`  ratio ensemble/job p50                 ${(result.ensemble.p50 / result.job.p50).toFixed(2)}x   (target ensemble p50 <= ${TARGET_P50_MS} ms: ${result.ensemble.p50 <= TARGET_P50_MS ? 'holds' : 'MISSED'})`);
    return result;
  } finally {
    await stopCluster(nodes);
  }
}
