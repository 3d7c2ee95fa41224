/**
 * npm run bench:invoke — REST invoke throughput against a bare node:http baseline, in one run:
 *  (a) bare node:http JSON echo
 *  (b) POST /api/v1/actor/invoke of /public/hello with unsigned envelopes (node signs as operator)
 *  (c) the same with client-signed envelopes, unique nonces
 *  (d) as (c), with a capability token attached that the call needs: /broadcast/hello invoked
 *      directly (same handler and reply as /public/hello, but not public), granted to the client
 *      by the operator (a root of the node), as `dms cap new` makes it
 *  (e) as (d), the grant reaching the client through a two-link delegation chain
 *  (f) as (b), with one watcher reading the dev stream (every envelope of every actor) from a
 *      process of its own
 * autocannon, 16 connections. Targets: b/a >= 0.15, c/a >= 0.08, d/c >= 0.90, f/b >= 0.85 (e/c
 * is shown). The node runs in dev mode throughout: (b) is the cost with the stream code there
 * and nobody watching.
 *  (g) afterwards, what the stream code costs with dev mode off: two fresh nodes with the same
 *      history, one of this build with dev mode off (x), one of a copy of it with the dev
 *      stream compiled out (y, ./lib/stream-free.ts), take (b)'s load in turns, in mirrored
 *      pairs. Target: median x/y >= 0.97.
 *
 * The cases are interleaved over several rounds and each ratio is the median of its rounds'
 * ratios, so load drift on a shared machine hits baseline and subject alike. Within a round
 * c, d and e run twice in mirrored order (c d e e d c): a drift that is linear in time then
 * weighs on each of them equally, which matters for d/c, a ratio near 1.
 */
import '../runtime/polyfills.js';
import { spawn } from 'node:child_process';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { encodeTokenList, issueToken } from '../runtime/capability/token.js';
import { KeyPair } from '../runtime/crypto/keys.js';
import { signEnvelopeSync } from '../runtime/crypto/signing.js';
import { msToNs, nowNs } from '../runtime/time.js';
import { encodeEnvelope, encodePayload, type Envelope } from '../runtime/wire/envelope.js';
import { removeHome, startNode } from '../test/helpers/node.js';
import { type Figures, measure, median, printTable, startEchoServer } from './lib/load.js';
import { streamFreeBuild } from './lib/stream-free.js';

const SECONDS = Number(process.env.BENCH_SECONDS ?? 5);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);
const DEV_OFF_PAIRS = Number(process.env.BENCH_DEV_OFF_PAIRS ?? 8);
const DEV_OFF_SECONDS = 3;
const CLOCK_TICKS = 100;

/** CPU seconds (user + system) a process has used: steadier than its rate on a shared machine. */
const cpuSeconds = (pid: number): number => {
  const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ');
  return (Number(fields[11]) + Number(fields[12])) / CLOCK_TICKS;
};
const CONNECTIONS = 16;
const headers = { 'content-type': 'application/json' };

const echo = await startEchoServer();
// One signing key sends every request of a case, far more than a sender may hold in the replay
// cache at once (actor.replay_per_sender): the quota would turn the measurement into 503s.
const node = await startNode({ config: { actor: { replay_per_sender: 1_000_000 }, general: { debug: true } } });

/**
 * A dev stream watcher that reads (and drops) everything it is sent, until stopped: a process
 * of its own, as a real watcher is (`dms dev watch`, a browser), so reading the stream does
 * not take time from this process's load generator. Resolves once it is subscribed.
 */
async function watchDevStream(): Promise<() => void> {
  const reader = `fetch(process.argv[1]).then(async (r) => { const s = r.body.getReader(); await s.read(); process.stdout.write('ready\\n'); for (;;) if ((await s.read()).done) return; });`;
  const child = spawn(process.execPath, ['-e', reader, `${node.url}/api/v1/dev/stream`], { stdio: ['ignore', 'pipe', 'inherit'] });
  await new Promise<void>((resolve, reject) => {
    child.stdout.once('data', () => resolve());
    child.once('exit', (code) => reject(new Error(`the dev stream watcher exited with ${code}`)));
  });
  return () => child.kill();
}
const url = `${node.url}/api/v1/actor/invoke`;
const to = { id: node.did.slice('did:key:'.length), did: node.did, addr: { host: node.peerId, inbox: 'root' } };
// Long enough for a round's pre-signed bodies, short enough that the replay cache (every
// accepted envelope holds an entry until its exp) does not fill over the rounds.
const exp = () => nowNs() + msToNs(150_000);

// Unsigned: built on the fly; every request needs its own nonce (replay) and cont (one waiter per cont).
let n = 0;
const unsignedTo = (host: string) => () => {
  n++;
  return `{"to":{"addr":{"host":"${host}","inbox":"root"}},"be":"/public/hello","from":{"addr":{"host":"${host}","inbox":"bench"}},"nonce":${n},"opt":{"exp":${exp()},"cont":"/private/r/${n}"},"msg":"e30="}`;
};
const unsignedBody = unsignedTo(node.peerId);

/**
 * Runs a load of unsigned bodies and adds the µs of `pid`'s CPU per request it served (warm-up
 * included, bodies counted as made): steadier than the rate on a shared machine.
 */
async function withCpu(pid: number, load: () => Promise<Figures>): Promise<Figures & { cpuUsPerRequest: number }> {
  const [cpu, start] = [cpuSeconds(pid), n];
  const figures = await load();
  return { ...figures, cpuUsPerRequest: ((cpuSeconds(pid) - cpu) / (n - start)) * 1e6 };
}

// Signed: signing is the client's cost, so bodies are signed before the clock starts, in
// batches sized from what the previous round consumed.
const client = KeyPair.generate();
let signed: string[] = [];
let signedNonce = 0;
let next = 0;
function signBodies(count: number): void {
  signed = new Array(count);
  for (let i = 0; i < count; i++) {
    const env: Envelope = {
      to,
      be: '/public/hello',
      from: { id: client.id, did: client.did, addr: { host: node.peerId, inbox: 'bench-signed' } },
      nonce: BigInt(++signedNonce),
      opt: { exp: exp(), cont: `/private/r/${signedNonce}` },
      msg: encodePayload({}),
    };
    signed[i] = encodeEnvelope(signEnvelopeSync(env, client));
  }
  next = 0;
}

// Capabilities: the operator (a root of the node) grants /broadcast/hello to one client (d),
// and delegates /broadcast to a lead who grants it to another (e). The node verifies a token
// list on first sight and caches the verdict by its bytes.
const capExp = nowNs() + msToNs(3_600_000);
class CappedBodies {
  readonly key = KeyPair.generate();
  bodies: string[] = [];
  next = 0;
  private nonce = 0;
  constructor(readonly cap: (aud: string) => Uint8Array) {}

  sign(count: number): void {
    const cap = this.cap(this.key.did);
    this.bodies = new Array(count);
    for (let i = 0; i < count; i++) {
      const env: Envelope = {
        to,
        be: '/broadcast/hello',
        from: { id: this.key.id, did: this.key.did, addr: { host: node.peerId, inbox: `bench-cap-${this.key.id.slice(-6)}` } },
        nonce: BigInt(++this.nonce),
        opt: { exp: exp(), cont: `/private/r/${this.nonce}` },
        msg: encodePayload({}),
        cap,
      };
      this.bodies[i] = encodeEnvelope(signEnvelopeSync(env, this.key));
    }
    this.next = 0;
  }
}
const operator = node.operator();
const lead = KeyPair.generate();
const granted = new CappedBodies((aud) => encodeTokenList([issueToken(operator, { act: 'invoke', aud, cap: ['/broadcast/hello'], exp: capExp })]));
const delegated = new CappedBodies((aud) => {
  const delegation = issueToken(operator, { act: 'delegate', aud: lead.did, cap: ['/broadcast'], exp: capExp, depth: 1 });
  return encodeTokenList([issueToken(lead, { act: 'invoke', aud, cap: ['/broadcast/hello'], exp: capExp, chain: delegation })]);
});

const cases = {
  a: { name: '(a) bare node:http JSON echo', opts: () => ({ url: echo.url, connections: CONNECTIONS, method: 'POST', body: '{"hello":"world"}', headers }) },
  b: {
    name: '(b) REST invoke, unsigned envelopes',
    opts: () => ({ url, connections: CONNECTIONS, requests: [{ method: 'POST', headers, setupRequest: (r: object) => ({ ...r, body: unsignedBody() }) }] }),
  },
  c: {
    name: '(c) REST invoke, client-signed envelopes',
    opts: () => ({ url, connections: CONNECTIONS, requests: [{ method: 'POST', headers, setupRequest: (r: object) => ({ ...r, body: signed[next++] ?? unsignedBody() }) }] }),
  },
  d: {
    name: '(d) REST invoke, signed + capability token',
    opts: () => ({ url, connections: CONNECTIONS, requests: [{ method: 'POST', headers, setupRequest: (r: object) => ({ ...r, body: granted.bodies[granted.next++] ?? unsignedBody() }) }] }),
  },
  f: {
    name: '(f) as (b), one dev stream watcher',
    opts: () => ({ url, connections: CONNECTIONS, requests: [{ method: 'POST', headers, setupRequest: (r: object) => ({ ...r, body: unsignedBody() }) }] }),
  },
  e: {
    name: '(e) REST invoke, signed + delegation chain',
    opts: () => ({ url, connections: CONNECTIONS, requests: [{ method: 'POST', headers, setupRequest: (r: object) => ({ ...r, body: delegated.bodies[delegated.next++] ?? unsignedBody() }) }] }),
  },
};

type Case = keyof typeof cases;
const rounds: Record<Case, Figures>[] = [];
const watcherCpu: { b: number; f: number }[] = [];
/** Two measurements of one case as one: mean rates and latencies, summed counts. */
const combine = (x: Figures, y: Figures): Figures => ({
  name: x.name,
  rps: Math.round((x.rps + y.rps) / 2),
  p50_ms: (x.p50_ms + y.p50_ms) / 2,
  p99_ms: (x.p99_ms + y.p99_ms) / 2,
  requests: x.requests + y.requests,
  non2xx: x.non2xx + y.non2xx,
  errors: x.errors + y.errors,
});
let perSecond = 4000;
for (let r = 0; r < ROUNDS; r++) {
  // c, d and e run twice a round: enough signed bodies for both runs, with a margin.
  signBodies(Math.ceil(perSecond * (SECONDS + 2) * 2.5));
  for (const capped of [granted, delegated]) capped.sign(Math.ceil(perSecond * (SECONDS + 2) * 2.5));
  const round = {} as Record<Case, Figures>;
  const run = (key: Case) => measure(cases[key].name, cases[key].opts(), SECONDS, r === 0 ? 2 : 1);
  round.a = await run('a');
  // Node CPU per request of (b) and (f): what a watcher costs the node itself, apart from the
  // watcher process's share of the machine.
  const b = await withCpu(node.pid, () => run('b'));
  const stopWatching = await watchDevStream();
  const f = await withCpu(node.pid, () => run('f'));
  stopWatching();
  [round.b, round.f] = [b, f];
  watcherCpu.push({ b: Math.round(b.cpuUsPerRequest), f: Math.round(f.cpuUsPerRequest) });
  const first: Partial<Record<Case, Figures>> = {};
  for (const key of ['c', 'd', 'e'] as const) first[key] = await run(key);
  for (const key of ['e', 'd', 'c'] as const) round[key] = combine(first[key]!, await run(key));
  if (next > signed.length) console.log(`round ${r + 1}: signed bodies ran out (${next} > ${signed.length}); raise the batch`);
  for (const [key, capped] of [['d', granted], ['e', delegated]] as const) {
    if (capped.next > capped.bodies.length) console.log(`round ${r + 1}: (${key}) bodies ran out (${capped.next} > ${capped.bodies.length}); raise the batch`);
    if (round[key].non2xx) console.log(`round ${r + 1}: (${key}) ${round[key].non2xx} requests refused: the token did not authorize`);
  }
  perSecond = Math.max(perSecond, round.c.rps, round.d.rps, round.e.rps);
  rounds.push(round);
  console.log(`round ${r + 1}: ${(['a', 'b', 'c', 'd', 'e', 'f'] as const).map((k) => `${k} ${round[k].rps}`).join(', ')} req/s`);
}
await node.stop();
removeHome(node.home);

// (g) dev mode off against the stream compiled out.
const streamFree = streamFreeBuild();
const config = { actor: { replay_per_sender: 1_000_000 } };
const [devOff, compiledOut] = await Promise.all([startNode({ config }), startNode({ config, cli: streamFree.cli })]);
const unsignedLoad = (target: typeof devOff) => {
  const body = unsignedTo(target.peerId);
  return { url: `${target.url}/api/v1/actor/invoke`, connections: CONNECTIONS, requests: [{ method: 'POST', headers, setupRequest: (r: object) => ({ ...r, body: body() }) }] };
};
const timed = (target: typeof devOff, name: string, warmup: number) =>
  withCpu(target.pid, () => measure(name, unsignedLoad(target), DEV_OFF_SECONDS, warmup));
const devOffRatios: number[] = [];
const devOffCpuRatios: number[] = [];
const devOffRates: { x: number; y: number; x_cpu_us: number; y_cpu_us: number }[] = [];
try {
  for (let i = 0; i < DEV_OFF_PAIRS; i++) {
    const warmup = i === 0 ? 2 : 0.5;
    const runX = () => timed(devOff, '(g) x: dev mode off', warmup);
    const runY = () => timed(compiledOut, '(g) y: dev stream compiled out', warmup);
    let x: Awaited<ReturnType<typeof timed>>;
    let y: Awaited<ReturnType<typeof timed>>;
    if (i % 2 === 0) {
      x = await runX();
      y = await runY();
    } else {
      y = await runY();
      x = await runX();
    }
    devOffRates.push({ x: x.rps, y: y.rps, x_cpu_us: Math.round(x.cpuUsPerRequest), y_cpu_us: Math.round(y.cpuUsPerRequest) });
    devOffRatios.push(x.rps / y.rps);
    devOffCpuRatios.push(x.cpuUsPerRequest / y.cpuUsPerRequest);
  }
} finally {
  await Promise.all([devOff.stop(), compiledOut.stop()]);
  removeHome(devOff.home);
  removeHome(compiledOut.home);
  streamFree.remove();
  echo.stop();
}

const mid = (key: Case): Figures => {
  const sorted = [...rounds].sort((x, y) => x[key].rps - y[key].rps);
  return sorted[Math.floor(sorted.length / 2)][key];
};
console.log();
printTable([mid('a'), mid('b'), mid('c'), mid('d'), mid('e'), mid('f')]);
const ratios = {
  'b/a': median(rounds.map((r) => r.b.rps / r.a.rps)),
  'c/a': median(rounds.map((r) => r.c.rps / r.a.rps)),
  'd/c': median(rounds.map((r) => r.d.rps / r.c.rps)),
  'e/c': median(rounds.map((r) => r.e.rps / r.c.rps)),
  'f/b': median(rounds.map((r) => r.f.rps / r.b.rps)),
};
console.log(`\nmedian of ${ROUNDS} rounds (${SECONDS} s per case per round):`);
console.log(`b/a = ${ratios['b/a'].toFixed(3)} (target >= 0.15: ${ratios['b/a'] >= 0.15 ? 'holds' : 'MISSED'})`);
console.log(`c/a = ${ratios['c/a'].toFixed(3)} (target >= 0.08: ${ratios['c/a'] >= 0.08 ? 'holds' : 'MISSED'})`);
console.log(`d/c = ${ratios['d/c'].toFixed(3)} (target >= 0.90: ${ratios['d/c'] >= 0.9 ? 'holds' : 'MISSED'})`);
console.log(`e/c = ${ratios['e/c'].toFixed(3)} (two-link chain, for information)`);
console.log(`f/b = ${ratios['f/b'].toFixed(3)} (target >= 0.85: ${ratios['f/b'] >= 0.85 ? 'holds' : 'MISSED'})`);
const watcherCpuRatio = median(watcherCpu.map((c) => c.f / c.b));
console.log(
  `    node CPU per request f/b: median ${watcherCpuRatio.toFixed(3)} (µs per request, b/f by round: ${watcherCpu.map((c) => `${c.b}/${c.f}`).join(', ')})`,
);
const devOffRatio = median(devOffRatios);
console.log(
  `\n(g) dev mode off / dev stream compiled out (${streamFree.hooks} hooks), ${DEV_OFF_PAIRS} mirrored pairs of ${DEV_OFF_SECONDS} s: ` +
    `median x/y = ${devOffRatio.toFixed(3)} (target >= 0.97: ${devOffRatio >= 0.97 ? 'holds' : 'MISSED'})`,
);
const devOffCpu = median(devOffCpuRatios);
console.log(`    node CPU per request, x/y: median ${devOffCpu.toFixed(3)} (the steadier figure on a shared machine; <= 1.03 is the same target)`);
console.log(`    pairs (x/y req/s, x/y µs CPU per request): ${devOffRates.map((r) => `${r.x}/${r.y} ${r.x_cpu_us}/${r.y_cpu_us}`).join(', ')}`);
mkdirSync(new URL('./results/', import.meta.url), { recursive: true });
writeFileSync(
  new URL('./results/invoke.json', import.meta.url),
  JSON.stringify({ at: new Date().toISOString(), seconds: SECONDS, rounds, ratios, watcher_cpu: { ratio: watcherCpuRatio, rounds: watcherCpu }, dev_off: { ratio: devOffRatio, cpu_ratio: devOffCpu, pairs: devOffRates } }, null, 2),
);
