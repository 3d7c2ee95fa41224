import { spawn, type ChildProcess } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import autocannon, { type Options, type Result } from 'autocannon';

/**
 * Replay-cache room for a load test: one REST caller (signed by the node) or one peer sends
 * hundreds of thousands of envelopes that stay in the cache until their exp, far past the
 * bounds a node keeps against a hostile sender (actor.replay_per_peer, replay_rest_quota,
 * replay_per_sender), which would turn the measurement into 503s.
 */
export const LOAD_NODE_CONFIG = {
  actor: { replay_capacity: 20_000_000, replay_rest_quota: 1_000_000, replay_per_peer: 2_000_000, replay_per_sender: 2_000_000 },
} as const;

export interface Figures {
  name: string;
  rps: number;
  p50_ms: number;
  p99_ms: number;
  requests: number;
  non2xx: number;
  errors: number;
  /** µs of CPU per request, the processes given to `measure` as `cpuOf` together; absent without them. */
  cpu_us_per_request?: number;
}

/**
 * A short warm-up (JIT, connection set-up), then the measured run. With `cpuOf`, the CPU those
 * processes spend is read over the measured run alone, so the warm-up's JIT work stays out of it.
 */
export async function measure(name: string, opts: Options, seconds: number, warmupSeconds = 2, cpuOf: number[] = []): Promise<Figures> {
  await autocannon({ ...opts, duration: warmupSeconds });
  const cpu = () => cpuSecondsOf(cpuOf);
  const before = cpu();
  const r: Result = await autocannon({ ...opts, duration: seconds });
  const cpuUs = ((cpu() - before) / Math.max(1, r.requests.total)) * 1e6;
  return {
    name,
    rps: Math.round(r.requests.average),
    p50_ms: r.latency.p50,
    p99_ms: r.latency.p99,
    requests: r.requests.total,
    non2xx: r.non2xx,
    errors: r.errors + r.timeouts,
    ...(cpuOf.length ? { cpu_us_per_request: Math.round(cpuUs * 10) / 10 } : {}),
  };
}

/** The machine's load average (1, 5, 15 min), printed beside every figure: the machine is shared. */
export const loadAverage = (): string => readFileSync('/proc/loadavg', 'utf8').split(' ').slice(0, 3).join(' ');

/**
 * CPU seconds a process has run, all its threads together, from the scheduler's own accounting
 * (/proc/<pid>/task/<tid>/schedstat, in ns): user+system time in /proc/<pid>/stat is sampled
 * at the 100 Hz tick, too coarse for a difference of a few percent over seconds.
 */
export function cpuSeconds(pid: number): number {
  let ns = 0;
  for (const tid of readdirSync(`/proc/${pid}/task`)) {
    try {
      ns += Number(readFileSync(`/proc/${pid}/task/${tid}/schedstat`, 'utf8').split(' ')[0]);
    } catch {
      // The thread ended between the listing and the read.
    }
  }
  return ns / 1e9;
}

/** `cpuSeconds` of several processes together. */
export const cpuSecondsOf = (pids: readonly number[]): number => pids.reduce((sum, pid) => sum + cpuSeconds(pid), 0);

/** One node under load in a side-by-side comparison: its process and the load it takes. */
export interface Side {
  pid: number;
  opts: () => Options;
}

export interface SideFigures {
  rps: number;
  /** µs of the node process's CPU per request it answered. */
  cpuUsPerRequest: number;
  requests: number;
  non2xx: number;
  errors: number;
}

/**
 * Loads every side at once, each with its own connections, for `seconds`: one window in which
 * whatever else the machine does (steal, other tenants, cache pressure) weighs on every side
 * alike, where sides measured in turn each meet their own weather. The sides start in the
 * order given; a comparison should rotate it from window to window.
 */
export async function sideBySide(sides: Side[], seconds: number): Promise<SideFigures[]> {
  const before = sides.map((s) => cpuSeconds(s.pid));
  const results = await Promise.all(sides.map((s) => autocannon({ ...s.opts(), duration: seconds })));
  return results.map((r, i) => ({
    rps: Math.round(r.requests.average),
    cpuUsPerRequest: ((cpuSeconds(sides[i].pid) - before[i]) / Math.max(1, r.requests.total)) * 1e6,
    requests: r.requests.total,
    non2xx: r.non2xx,
    errors: r.errors + r.timeouts,
  }));
}

/**
 * `windows` side-by-side windows of `seconds`, after a warm-up window (none for 0), the order of the sides
 * rotated each window. Returns each window's figures, in the order the sides were given.
 */
export async function compareSideBySide(sides: Side[], windows: number, seconds: number, warmupSeconds = 2): Promise<SideFigures[][]> {
  if (warmupSeconds > 0) await sideBySide(sides, warmupSeconds);
  const out: SideFigures[][] = [];
  for (let w = 0; w < windows; w++) {
    const shift = w % sides.length;
    const order = sides.map((_, i) => (i + shift) % sides.length);
    const figures = await sideBySide(order.map((i) => sides[i]), seconds);
    const back: SideFigures[] = new Array(sides.length);
    order.forEach((i, k) => (back[i] = figures[k]));
    out.push(back);
  }
  return out;
}

/** A server in a process of its own that prints its port on its first line; stopped with SIGTERM. */
async function startServerProcess(args: string[], what: string): Promise<{ url: string; proc: ChildProcess; stop(): void }> {
  const proc = spawn(process.execPath, args, { stdio: ['ignore', 'pipe', 'inherit'] });
  const port = await new Promise<string>((resolve, reject) => {
    proc.stdout!.once('data', (d) => resolve(String(d).trim()));
    proc.once('exit', (c) => reject(new Error(`${what} exited (${c})`)));
  });
  return { url: `http://127.0.0.1:${port}`, proc, stop: () => proc.kill('SIGTERM') };
}

export const startEchoServer = () => startServerProcess([fileURLToPath(new URL('./echo-server.mjs', import.meta.url))], 'echo server');

/** The machine's bound for a signed invoke (./bound-server.ts): one worker per core, in processes of their own. */
export const startBoundServer = () => startServerProcess(['--import', 'tsx', fileURLToPath(new URL('./bound-server.ts', import.meta.url))], 'bound server');

export function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
}

export function printTable(rows: Figures[]): void {
  const line = (cols: string[]) => cols.map((c, i) => (i === 0 ? c.padEnd(44) : c.padStart(10))).join('');
  console.log(line(['case', 'req/s', 'p50 ms', 'p99 ms', 'non-2xx', 'errors']));
  for (const r of rows) console.log(line([r.name, String(r.rps), String(r.p50_ms), String(r.p99_ms), String(r.non2xx), String(r.errors)]));
}
