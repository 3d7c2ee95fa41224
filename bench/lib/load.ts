import { spawn, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import autocannon, { type Options, type Result } from 'autocannon';

export interface Figures {
  name: string;
  rps: number;
  p50_ms: number;
  p99_ms: number;
  requests: number;
  non2xx: number;
  errors: number;
}

/** A short warm-up (JIT, connection set-up), then the measured run. */
export async function measure(name: string, opts: Options, seconds: number, warmupSeconds = 2): Promise<Figures> {
  await autocannon({ ...opts, duration: warmupSeconds });
  const r: Result = await autocannon({ ...opts, duration: seconds });
  return {
    name,
    rps: Math.round(r.requests.average),
    p50_ms: r.latency.p50,
    p99_ms: r.latency.p99,
    requests: r.requests.total,
    non2xx: r.non2xx,
    errors: r.errors + r.timeouts,
  };
}

export async function startEchoServer(): Promise<{ url: string; proc: ChildProcess; stop(): void }> {
  const proc = spawn(process.execPath, [fileURLToPath(new URL('./echo-server.mjs', import.meta.url))], { stdio: ['ignore', 'pipe', 'inherit'] });
  const port = await new Promise<string>((resolve, reject) => {
    proc.stdout!.once('data', (d) => resolve(String(d).trim()));
    proc.once('exit', (c) => reject(new Error(`echo server exited (${c})`)));
  });
  return { url: `http://127.0.0.1:${port}`, proc, stop: () => proc.kill('SIGTERM') };
}

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
