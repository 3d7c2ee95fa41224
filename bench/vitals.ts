/**
 * npm run bench:vitals — what a node costs its device, measured from outside, in one run:
 *  (a) cold start: `dms start` in a fresh home (keys made, database created and migrated) to the
 *      first 200 on /health, process spawn included; 5 runs. Target: median <= 1.0 s.
 *  (b) warm start: the same in a home that has run before; 5 runs. Target: median <= 0.7 s.
 *  Both start from V8's code cache of the program (runtime/code-cache.ts), which a node writes
 *  once per build; each build here has a cache folder of its own, written by an unmeasured start
 *  first. (a0): the cold start with no code cache at all (an empty folder each time), as the
 *  first start after an install or a build is.
 *  (c) idle RSS 10 s after the node answered /health. Target: <= 100 MB. Also 30 s after, once
 *      V8's memory reducer has run: it gives back the young generation that start-up grew (a
 *      node measured at 5 s intervals went from 109 to 95 MB between 20 and 25 s), so the second
 *      figure is what a node settles at; the target is the first.
 *  (d) null jobs completed per second from 32 concurrent REST clients (20,000 jobs in rounds
 *      of 5,000, each from its first submission until none is pending), and (e) the node's RSS
 *      once they all ended, and (f) 60 s after that with nothing to do (BENCH_SETTLE_S): V8 keeps
 *      the heap a burst grew until its memory reducer sees the node idle (a node measured every
 *      10 s after 10,000 jobs held 216 MB for 30 s, then 123 MB from 40 s on), so (e) is the
 *      peak a burst leaves and (f) what the node gives back. The clients are this process's
 *      (./lib/api.ts: node:http on kept connections); their CPU per job is printed beside, since
 *      they share the two cores.
 *      Target: >= 1,500 per second.
 * The baseline, in the same run and spawned the same way: a bare node:http process answering
 * /health (the floor of (a), (b), (c): what Node itself costs). The ratio says how far above that
 * floor the node is. With BENCH_VITALS_COMPARE=<dir> (a copy of another build beside dist/, e.g.
 * dist-before), every figure is also measured for that build, runs interleaved with this one's.
 * Nodes run with the network on (loopback, no bootstrap peers), as an operator's node would.
 */
import '../runtime/polyfills.js';
import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { fileURLToPath, pathToFileURL } from 'node:url';
import type { JobSpecInput } from '../behaviors/jobs/schema.js';
import { removeHome, TEST_ENV, tempHome } from '../test/helpers/node.js';
import { call } from './lib/api.js';
import { loadAverage } from './lib/load.js';

const RUNS = Number(process.env.BENCH_RUNS ?? 5);
const JOBS = Number(process.env.BENCH_JOBS ?? 20_000);
const ROUND = Math.min(JOBS, 5000);
const SETTLE_S = Number(process.env.BENCH_SETTLE_S ?? 60);
const IDLE_MS = 10_000;
const SETTLED_MS = 30_000;
const CONCURRENCY = 32;
const TARGETS = { cold_s: 1.0, warm_s: 0.7, idle_rss_mb: 100, jobs_per_s: 1500 };

const root = fileURLToPath(new URL('../', import.meta.url));
const builds: Array<{ name: string; cli: string }> = [{ name: 'this build', cli: `${root}dist/cli/main.js` }];
if (process.env.BENCH_VITALS_COMPARE) builds.push({ name: process.env.BENCH_VITALS_COMPARE, cli: `${root}${process.env.BENCH_VITALS_COMPARE}/cli/main.js` });

/** The floor: Node starting and answering /health, nothing else. */
const BARE = `require('node:http').createServer((q, s) => s.end('{"status":"ok"}')).listen(Number(process.argv[1]), '127.0.0.1')`;

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const round = (x: number, d = 3) => Math.round(x * 10 ** d) / 10 ** d;

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address() as { port: number };
      s.close(() => resolve(port));
    });
  });
}

function rssMb(pid: number): number {
  const kb = Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1]);
  return round(kb / 1024, 1);
}

interface Running {
  proc: ChildProcess;
  url: string;
  /** Spawn to the first 200 on /health, in seconds. */
  seconds: number;
  stop(): Promise<void>;
}

/** Spawns `args` and polls /health every 5 ms until it answers 200: the time an operator's supervisor waits. */
async function spawnUntilHealthy(args: (port: number) => string[], env: Record<string, string> = {}): Promise<Running> {
  const port = await freePort();
  const url = `http://127.0.0.1:${port}`;
  let output = '';
  const t0 = performance.now();
  const proc = spawn(process.execPath, args(port), { env: { ...process.env, ...TEST_ENV, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
  proc.stdout!.on('data', (d) => (output += d));
  proc.stderr!.on('data', (d) => (output += d));
  const exited = new Promise<void>((r) => proc.once('exit', () => r()));
  let gone = false;
  void exited.then(() => (gone = true));
  const deadline = Date.now() + 30_000;
  for (;;) {
    if (gone) throw new Error(`process exited before answering /health:\n${output}`);
    if (Date.now() > deadline) {
      proc.kill('SIGKILL');
      throw new Error(`no 200 on /health within 30 s:\n${output}`);
    }
    const ok = await fetch(`${url}/health`).then(async (r) => (await r.arrayBuffer(), r.ok), () => false);
    if (ok) break;
    await sleep(5);
  }
  const seconds = (performance.now() - t0) / 1000;
  return { proc, url, seconds, stop: async () => (gone || proc.kill('SIGTERM'), exited) };
}

const CONFIG = JSON.stringify({ general: { log_level: 'warn' } });
/** Each build's code cache folder (DMS_CODE_CACHE), so no other checkout's or run's cache counts. */
const codeCaches = new Map(builds.map((b) => [b.name, tempHome('dms-vitals-cache-')]));
const startDms = (cli: string, home: string, codeCache = codeCaches.get(builds.find((b) => b.cli === cli)!.name)!) => {
  writeFileSync(`${home}/dms_config.json`, CONFIG);
  return spawnUntilHealthy((port) => [cli, '--home', home, 'start', '--port', String(port), '--log-level', 'warn'], { DMS_CODE_CACHE: codeCache });
};
/**
 * Waits until a node of build `b` has written its code cache (2 s after it answers), at most
 * 10 s; at once for a build without one (a compared build from before it: no dist/lib/dms.cjs).
 */
async function codeCacheWritten(b: { name: string; cli: string }): Promise<void> {
  if (!existsSync(new URL('../lib/dms.cjs', pathToFileURL(b.cli)))) return;
  const deadline = Date.now() + 10_000;
  while (!readdirSync(codeCaches.get(b.name)!).some((f) => f.endsWith('.node.v8')) && Date.now() < deadline) await sleep(100);
}
const startBare = () => spawnUntilHealthy((port) => ['-e', BARE, String(port)]);

async function coldAndWarm(): Promise<Record<string, { cold: number[]; warm: number[]; uncached: number[] }>> {
  const out: Record<string, { cold: number[]; warm: number[]; uncached: number[] }> = { bare: { cold: [], warm: [], uncached: [] } };
  for (const b of builds) out[b.name] = { cold: [], warm: [], uncached: [] };
  const warmHomes = new Map<string, string>();
  for (const b of builds) {
    const home = tempHome('dms-vitals-');
    const first = await startDms(b.cli, home);
    await codeCacheWritten(b);
    await first.stop();
    warmHomes.set(b.name, home);
  }
  // Interleaved, so the machine's weather falls on every build alike.
  for (let i = 0; i < RUNS; i++) {
    const bare = await startBare();
    await bare.stop();
    out.bare.cold.push(bare.seconds);
    out.bare.warm.push(bare.seconds);
    for (const b of builds) {
      const home = tempHome('dms-vitals-');
      const cold = await startDms(b.cli, home);
      await cold.stop();
      removeHome(home);
      out[b.name].cold.push(cold.seconds);
      const warm = await startDms(b.cli, warmHomes.get(b.name)!);
      await warm.stop();
      out[b.name].warm.push(warm.seconds);
      const empty = tempHome('dms-vitals-cache-');
      const uncachedHome = tempHome('dms-vitals-');
      const uncached = await startDms(b.cli, uncachedHome, empty);
      await uncached.stop();
      removeHome(uncachedHome);
      removeHome(empty);
      out[b.name].uncached.push(uncached.seconds);
    }
  }
  for (const home of warmHomes.values()) removeHome(home);
  return out;
}

async function idleRss(): Promise<Record<string, { at10: number; at30: number }>> {
  const running: Array<{ name: string; r: Running; home?: string }> = [{ name: 'bare', r: await startBare() }];
  for (const b of builds) {
    const home = tempHome('dms-vitals-');
    running.push({ name: b.name, r: await startDms(b.cli, home), home });
  }
  await sleep(IDLE_MS);
  const at10 = new Map(running.map(({ name, r }) => [name, rssMb(r.proc.pid!)]));
  await sleep(SETTLED_MS - IDLE_MS);
  const out: Record<string, { at10: number; at30: number }> = {};
  for (const { name, r, home } of running) {
    out[name] = { at10: at10.get(name)!, at30: rssMb(r.proc.pid!) };
    await r.stop();
    if (home) removeHome(home);
  }
  return out;
}

const SPEC: JobSpecInput = { name: 'bench', image: 'none', executor: 'null', resources: { cpu: { cores: 0.001 }, memory: { size: 1024 } } };

async function count(url: string, status: string): Promise<number> {
  const res = await fetch(`${url}/api/v1/jobs?status=${status}&limit=1`);
  if (res.status !== 200) throw new Error(`GET /jobs answered ${res.status}`);
  await res.arrayBuffer();
  return Number(res.headers.get('x-total-count'));
}

/** Jobs whose status is not `completed` among those `url`'s node has ended. */
const failedCount = (url: string) => count(url, 'failed');

/**
 * 20k null jobs at 32 clients on each build's node, in rounds of 5k that alternate between the
 * nodes (both running throughout), so the machine's weather falls on every build alike: jobs
 * completed per second of each round (its first submission to the moment none is pending or
 * running, polled every 20 ms), the median of the rounds; then each node's RSS.
 */
async function nullJobs(): Promise<Record<string, { jobs_per_s: number; rounds: number[]; client_us_per_job: number; failed: number; rss_after_mb: number; rss_settled_mb: number }>> {
  const nodes = [];
  for (const b of builds) {
    const home = tempHome('dms-vitals-');
    nodes.push({ b, home, node: await startDms(b.cli, home), rounds: [] as number[], clientUs: [] as number[] });
  }
  try {
    for (let round = 0; round < JOBS / ROUND; round++) {
      for (const n of nodes) {
        const t0 = performance.now();
        const cpu0 = process.cpuUsage();
        let next = 0;
        await Promise.all(
          Array.from({ length: CONCURRENCY }, async () => {
            while (next < ROUND) {
              next++;
              await call(n.node, 'POST', '/jobs', SPEC);
            }
          }),
        );
        const cpu = process.cpuUsage(cpu0);
        n.clientUs.push((cpu.user + cpu.system) / ROUND);
        const deadline = Date.now() + 600_000;
        while ((await count(n.node.url, 'pending,running')) > 0) {
          if (Date.now() > deadline) throw new Error('jobs still pending or running after 600 s');
          await sleep(20);
        }
        n.rounds.push(Math.round(ROUND / ((performance.now() - t0) / 1000)));
      }
    }
    const out: Awaited<ReturnType<typeof nullJobs>> = {};
    for (const n of nodes) out[n.b.name] = { jobs_per_s: median(n.rounds), rounds: n.rounds, client_us_per_job: Math.round(median(n.clientUs)), failed: await failedCount(n.node.url), rss_after_mb: rssMb(n.node.proc.pid!), rss_settled_mb: 0 };
    // Every node idles at once, so the wait is paid once whatever the number of builds.
    await sleep(SETTLE_S * 1000);
    for (const n of nodes) out[n.b.name].rss_settled_mb = rssMb(n.node.proc.pid!);
    return out;
  } finally {
    for (const n of nodes) {
      await n.node.stop();
      removeHome(n.home);
    }
  }
}

console.log(`load average at start: ${loadAverage()} (2 cores, shared)`);
const starts = await coldAndWarm();
const idle = await idleRss();
const work = await nullJobs();

const bare = { cold_median_s: round(median(starts.bare.cold)), warm_median_s: round(median(starts.bare.warm)), idle_rss_mb: idle.bare.at10, idle_rss_30s_mb: idle.bare.at30 };
const measured = builds.map((b) => ({
  build: b.name,
  cold_median_s: round(median(starts[b.name].cold)),
  cold_range_s: `${round(Math.min(...starts[b.name].cold), 2)}–${round(Math.max(...starts[b.name].cold), 2)}`,
  cold_no_code_cache_s: round(median(starts[b.name].uncached)),
  warm_median_s: round(median(starts[b.name].warm)),
  warm_range_s: `${round(Math.min(...starts[b.name].warm), 2)}–${round(Math.max(...starts[b.name].warm), 2)}`,
  idle_rss_mb: idle[b.name].at10,
  idle_rss_30s_mb: idle[b.name].at30,
  null_jobs_per_s: work[b.name].jobs_per_s,
  rounds_per_s: work[b.name].rounds.join(' '),
  client_us_per_job: work[b.name].client_us_per_job,
  rss_after_jobs_mb: work[b.name].rss_after_mb,
  rss_settled_mb: work[b.name].rss_settled_mb,
  failed: work[b.name].failed,
}));
const rows = [{ build: 'bare node:http (baseline)', ...bare }, ...measured];
console.table(rows);
const [me, other] = measured;
const holds = (ok: boolean) => (ok ? 'holds' : 'MISSED');
console.log(`cold start ${me.cold_median_s} s = ${round(me.cold_median_s / bare.cold_median_s, 1)}× bare node (target <= ${TARGETS.cold_s} s: ${holds(me.cold_median_s <= TARGETS.cold_s)})`);
console.log(`cold start with no code cache (the first after a build) ${me.cold_no_code_cache_s} s`);
console.log(`warm start ${me.warm_median_s} s = ${round(me.warm_median_s / bare.warm_median_s, 1)}× bare node (target <= ${TARGETS.warm_s} s: ${holds(me.warm_median_s <= TARGETS.warm_s)})`);
console.log(`idle RSS ${me.idle_rss_mb} MB = ${round(me.idle_rss_mb / bare.idle_rss_mb, 1)}× bare node (target <= ${TARGETS.idle_rss_mb} MB: ${holds(me.idle_rss_mb <= TARGETS.idle_rss_mb)}); ${me.idle_rss_30s_mb} MB at 30 s`);
console.log(
  `null jobs ${me.null_jobs_per_s}/s at ${CONCURRENCY} clients (target >= ${TARGETS.jobs_per_s}: ${holds(me.null_jobs_per_s >= TARGETS.jobs_per_s)}); RSS after ${JOBS} jobs ${me.rss_after_jobs_mb} MB, ${SETTLE_S} s later ${me.rss_settled_mb} MB; the clients' own CPU ${me.client_us_per_job} µs per job`,
);
if (other) {
  console.log(
    `this build / ${other.build}: cold ${round(me.cold_median_s / other.cold_median_s)}, warm ${round(me.warm_median_s / other.warm_median_s)}, idle RSS ${round(me.idle_rss_mb / other.idle_rss_mb)} (at 30 s ${round(me.idle_rss_30s_mb / other.idle_rss_30s_mb)}), jobs/s ${round(me.null_jobs_per_s / other.null_jobs_per_s)}, RSS after jobs ${round(me.rss_after_jobs_mb / other.rss_after_jobs_mb)} (settled ${round(me.rss_settled_mb / other.rss_settled_mb)})`,
  );
}
console.log(`load average at end: ${loadAverage()}`);
for (const dir of codeCaches.values()) removeHome(dir);
mkdirSync(new URL('./results/', import.meta.url), { recursive: true });
writeFileSync(new URL('./results/vitals.json', import.meta.url), JSON.stringify({ at: new Date().toISOString(), load_end: loadAverage(), starts, idle, work, rows }, null, 2));
