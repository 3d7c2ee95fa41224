/**
 * npm run bench:tunnel — what `/dms/tunnel/1.0.0` costs against a raw libp2p stream between the
 * same two hosts (the node's own stack: TCP, Noise, Yamux; runtime/network/host.ts), in one run:
 *  (a) throughput: BENCH_TUNNEL_MB MiB (default 256) sent one way, acknowledged by one byte at the
 *      end. Raw: over one libp2p stream to a sink protocol. Tunnel: a TCP client -> a local listener on the
 *      opener (as `dms jobs port-forward` makes) -> the tunnel -> the provider's TunnelServer ->
 *      a TCP sink (the job's port). The client and the sink are the two parts' programs: they run
 *      in a process of their own (the "apps" child), as containers do, not inside either node.
 *      Alternated in rounds; the median of each is compared (target >= 0.8x). Rounds are long
 *      because the tunnel's two TCP hops are new connections each round, which the kernel's
 *      buffers take tens of MiB to grow into (64 MiB rounds moved 0.32-0.5x of the raw stream, 256
 *      MiB rounds 0.58-0.67x, in the same hour); the raw stream rides the hosts' one connection.
 *      Printed beside, not the target's figure: the same with the client in the opener's process
 *      and the sink in the provider's; and a bare relay, the same path with a plain TCP connection
 *      between the two nodes' processes in place of the libp2p stream (each node's side Node's
 *      socket pipe; no Noise, no Yamux), with what each process spends per MiB in every series:
 *      the tunnel's cost over the raw stream's, set against what a bare relay costs.
 *  (b) latency: 512-byte request-response round trips at concurrency 1. Raw: an echo protocol on
 *      one reused stream (test/helpers/libp2p-echo.ts). Tunnel: a TCP echo behind the same path
 *      as (a), over one kept connection. Added p50 = tunnel p50 - raw p50 (target <= +0.5 ms).
 * (c) placement: a 2-part ensemble on 2 node processes against one job on the other node
 *     (bench/lib/ensemble-placement.ts; target ensemble p50 <= 100 ms). BENCH_TUNNEL_ONLY=c (or
 *     a, b) runs only those parts; BENCH_TUNNEL_PLACEMENTS sets how many of each (default 30).
 * The provider runs in a child process, as the node running the job would, and the job's
 * programs (sink, echo, the throughput client) in another; the opener's side (its host, the
 * forward listeners, the latency client) is this one.
 * The tunnel path has two loopback TCP hops more than the raw one (client to listener, provider to
 * target): the nodes' halves of them (the listener's reads, the provider's writes) are the real
 * cost of the feature and are counted. No Docker: the target is a local TCP server, so the
 * figures are the tunnel's, not the container network's.
 */
import '../runtime/polyfills.js';
import { connect, createServer, type AddressInfo, type Server, type Socket } from 'node:net';
import { type ChildProcess, spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import { availableParallelism } from 'node:os';
import { fileURLToPath } from 'node:url';
import type { PeerId, Stream } from '@libp2p/interface';
import { multiaddr } from '@multiformats/multiaddr';
import { KeyPair } from '../runtime/crypto/keys.js';
import { encodeFrame } from '../runtime/network/frames.js';
import { createHost, type DmsLibp2p } from '../runtime/network/host.js';
import { openTunnel, pipe, TunnelServer } from '../runtime/network/tunnel.js';
import { raiseMallocThresholds } from '../runtime/malloc-thresholds.js';
import { openEcho, serveEcho } from '../test/helpers/libp2p-echo.js';
import { ensemblePlacement } from './lib/ensemble-placement.js';
import { cpuSeconds } from './lib/load.js';

const MIB = 1024 * 1024;
const TOTAL = Number(process.env.BENCH_TUNNEL_MB ?? 256) * MIB;
const ROUNDS = Number(process.env.BENCH_TUNNEL_ROUNDS ?? 5);
const SAMPLES = Number(process.env.BENCH_SAMPLES ?? 2000);
const WARMUP = Number(process.env.BENCH_WARMUP ?? 500);
const PAYLOAD = 512;
const PLACEMENTS = Number(process.env.BENCH_TUNNEL_PLACEMENTS ?? 30);
/** Which parts to run (a, b: the tunnel; c: placement), all by default. */
const ONLY = process.env.BENCH_TUNNEL_ONLY ?? 'abc';
const CHUNK = 64 * 1024;
const SINK_PROTOCOL = '/dms-bench/sink/1.0.0';
const JOB = '00000000-0000-4000-8000-000000000001';
const quiet = { warn: () => undefined, debug: () => undefined };

const listen = (server: Server): Promise<number> => new Promise((r) => server.listen(0, '127.0.0.1', () => r((server.address() as AddressInfo).port)));

/** A TCP server that answers one byte once TOTAL bytes arrived on a connection. */
const sinkServer = () =>
  createServer((s) => {
    let n = 0;
    s.on('data', (d) => {
      n += d.length;
      if (n >= TOTAL) s.write(Buffer.of(1));
    });
    s.on('error', () => undefined);
  });

async function sendAll(write: (chunk: Uint8Array) => Promise<void>): Promise<void> {
  const chunk = new Uint8Array(CHUNK).fill(7);
  for (let sent = 0; sent < TOTAL; sent += CHUNK) await write(chunk);
}

/** MiB/s of one raw libp2p stream into the sink protocol. */
async function rawThroughput(client: DmsLibp2p, server: { peerId: PeerId }): Promise<number> {
  const stream = await client.dialProtocol(server.peerId, SINK_PROTOCOL);
  const acked = new Promise<void>((r) => stream.addEventListener('message', () => r(), { once: true }));
  const t0 = performance.now();
  await sendAll(async (c) => {
    if (!stream.send(c)) await stream.onDrain();
  });
  await acked;
  const ms = performance.now() - t0;
  stream.abort(new Error('done'));
  return TOTAL / MIB / (ms / 1000);
}

/**
 * A listener whose connections are piped, both ways, to a new connection to `port`: a relay
 * with nothing between its two sockets.
 */
const tcpRelay = (port: number) =>
  createServer((inbound) => {
    const outbound = connect({ host: '127.0.0.1', port });
    inbound.setNoDelay(true);
    outbound.setNoDelay(true);
    inbound.pipe(outbound).pipe(inbound);
    inbound.on('error', () => outbound.destroy());
    outbound.on('error', () => inbound.destroy());
  });

/** MiB/s of one TCP connection through the forward listener and the tunnel into the TCP sink. */
async function tunnelThroughput(forwardPort: number): Promise<number> {
  const socket = await dial(forwardPort);
  const acked = new Promise<void>((r) => socket.once('data', () => r()));
  const t0 = performance.now();
  await sendAll((c) => (socket.write(c) ? Promise.resolve() : new Promise((r) => socket.once('drain', () => r()))));
  await acked;
  const ms = performance.now() - t0;
  socket.destroy();
  return TOTAL / MIB / (ms / 1000);
}

const dial = (port: number): Promise<Socket> =>
  new Promise((resolve, reject) => {
    const s = connect({ host: '127.0.0.1', port }, () => resolve(s));
    s.setNoDelay(true);
    s.once('error', reject);
  });

/** p50 and p99 of `samples` round trips of `roundTrip`, after a warm-up. */
async function latencies(roundTrip: () => Promise<void>): Promise<{ p50: number; p99: number }> {
  for (let i = 0; i < WARMUP; i++) await roundTrip();
  const times = new Float64Array(SAMPLES);
  for (let i = 0; i < SAMPLES; i++) {
    const t0 = performance.now();
    await roundTrip();
    times[i] = performance.now() - t0;
  }
  times.sort();
  return { p50: times[Math.floor(SAMPLES * 0.5)], p99: times[Math.floor(SAMPLES * 0.99)] };
}

/** One kept TCP connection to the echo through the tunnel: send PAYLOAD bytes, wait for them back. */
async function tunnelEcho(forwardPort: number): Promise<{ roundTrip: () => Promise<void>; close: () => void }> {
  const socket = await dial(forwardPort);
  const payload = Buffer.alloc(PAYLOAD, 1);
  let waiting: { left: number; done: () => void } | undefined;
  socket.on('data', (d) => {
    if (!waiting) return;
    waiting.left -= d.length;
    if (waiting.left <= 0) {
      const w = waiting;
      waiting = undefined;
      w.done();
    }
  });
  return {
    roundTrip: () =>
      new Promise<void>((done) => {
        waiting = { left: PAYLOAD, done };
        socket.write(payload);
      }),
    close: () => socket.destroy(),
  };
}

/** CPU milliseconds process `pid` (every thread) has run so far (the scheduler's ns account). */
const cpuMs = (pid: number): number => cpuSeconds(pid) * 1000;

/** `measure`'s figure and the CPU milliseconds each of `pids` spent meanwhile. */
async function withCpu<T>(pids: number[], measure: () => Promise<T>): Promise<{ value: T; cpu: number[] }> {
  const before = pids.map(cpuMs);
  const value = await measure();
  return { value, cpu: pids.map((p, i) => cpuMs(p) - before[i]!) };
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const r2 = (x: number) => Math.round(x * 100) / 100;
const r3 = (x: number) => Math.round(x * 1000) / 1000;

/**
 * The provider's side, in a process of its own as on a real network: its host, the tunnel
 * handler, the sink and echo protocols, and the job's two TCP ports. Prints its address, then
 * runs until its stdin closes.
 */
async function provider(): Promise<void> {
  raiseMallocThresholds(); // as a node does once it serves
  const server = await createHost({ keyPair: KeyPair.generate() });
  const job = JSON.parse(process.env.BENCH_TUNNEL_JOB_PORTS!) as JobPorts;
  // The comparison's sink, inside this node's process.
  const sink = sinkServer();
  const inlineSinkPort = await listen(sink);
  const ports: Record<number, number> = { [PORT.sink]: job.sink, [PORT.echo]: job.echo, [PORT.inlineSink]: inlineSinkPort };
  await TunnelServer.attach(server, {
    authorize: async (_peer, req) => ({ host: '127.0.0.1', port: ports[req.port]! }),
    maxPerPeer: 16,
    maxTotal: 256,
    idleMs: 60_000,
    log: quiet,
  });
  await serveEcho(server);
  await server.handle(SINK_PROTOCOL, (stream: Stream) => {
    let n = 0;
    stream.addEventListener('message', (e) => {
      n += e.data.byteLength;
      if (n >= TOTAL) stream.send(Uint8Array.of(1));
    });
  });
  // The bare relay's provider half: the job's sink behind a plain TCP relay.
  const relay = tcpRelay(job.sink);
  const relayPort = await listen(relay);
  await server.start();
  process.stdout.write(JSON.stringify({ addrs: server.getMultiaddrs().map(String), relayPort }) + '\n');
  process.stdin.resume();
  await new Promise((r) => process.stdin.once('end', r));
  sink.close();
  relay.close();
  await server.stop();
}

/** The job's ports on the provider (what the tunnel header names) and where each ends. */
const PORT = { sink: 1, echo: 2, inlineSink: 3 } as const;
interface JobPorts {
  sink: number;
  echo: number;
}

/**
 * The parts' programs, in a process of neither node: the job's sink and echo, and the other
 * part's client, which sends TOTAL bytes to the port named on each stdin line and answers with
 * its MiB/s. Prints its ports first.
 */
async function apps(): Promise<void> {
  const sink = sinkServer();
  const echo = createServer((s) => {
    s.setNoDelay(true);
    s.pipe(s);
    s.on('error', () => undefined);
  });
  const ports: JobPorts = { sink: await listen(sink), echo: await listen(echo) };
  process.stdout.write(JSON.stringify(ports) + '\n');
  for await (const line of createInterface({ input: process.stdin })) {
    process.stdout.write(JSON.stringify({ mibs: await tunnelThroughput(Number(line)) }) + '\n');
  }
  sink.close();
  echo.close();
}

interface Child {
  child: ChildProcess;
  /** The child's next line of output, parsed. */
  next: <T>() => Promise<T>;
}

/** This file run as `role` in a process of its own, speaking JSON lines on stdout. */
function startChild(role: 'provider' | 'apps', env: Record<string, string> = {}): Child {
  // `node --cpu-prof --import tsx bench/tunnel.ts` profiles every side: the children take the flags.
  const child = spawn(process.execPath, [...process.execArgv.filter((a) => a.startsWith('--cpu-prof')), '--import', 'tsx', fileURLToPath(import.meta.url), role], {
    stdio: ['pipe', 'pipe', 'inherit'],
    env: { ...process.env, ...env },
  });
  const lines = createInterface({ input: child.stdout! })[Symbol.asyncIterator]();
  const exited = new Promise<never>((_, reject) => child.once('exit', (code) => reject(new Error(`the ${role} process exited with code ${code}`))));
  exited.catch(() => undefined);
  const next = async <T>(): Promise<T> => {
    const line = await Promise.race([lines.next(), exited]);
    if (line.done) throw new Error(`the ${role} process closed its output`);
    return JSON.parse(line.value) as T;
  };
  return { child, next };
}

async function main(): Promise<void> {
  // The two nodes' processes keep freed heap as a serving node does; the apps process stands
  // for the parts' own programs and keeps Node's default (runtime/malloc-thresholds.ts).
  raiseMallocThresholds();
  const appsChild = startChild('apps');
  const jobPorts = await appsChild.next<JobPorts>();
  const providerChild = startChild('provider', { BENCH_TUNNEL_JOB_PORTS: JSON.stringify(jobPorts) });
  const { addrs, relayPort } = await providerChild.next<{ addrs: string[]; relayPort: number }>();
  const client = await createHost({ keyPair: KeyPair.generate() });
  await client.start();
  const connection = await client.dial(addrs.map((a) => multiaddr(a)));
  const serverId = connection.remotePeer;
  const server = { peerId: serverId, getMultiaddrs: () => [connection.remoteAddr] };
  // The opener's forward listeners, as daemon/tunnels.ts makes them.
  const forward = (port: number) =>
    createServer((socket) => {
      socket.pause();
      openTunnel(client, serverId, { job_id: JOB, port }).then(
        ({ stream, rest }) => {
          pipe(socket, stream, rest, 60_000);
          socket.resume();
        },
        () => socket.destroy(),
      );
    });
  const forwards = [forward(PORT.sink), forward(PORT.echo), forward(PORT.inlineSink)];
  // The bare relay's opener half: a plain TCP relay to the provider's.
  forwards.push(tcpRelay(relayPort));
  const [sinkForwardPort, echoForwardPort, inlineForwardPort, chainPort] = await Promise.all(forwards.map(listen));
  try {
    const pids = [process.pid, providerChild.child.pid!, appsChild.child.pid!];
    type Round = { value: number; cpu: number[] };
    const runs: Record<'raw' | 'tunnel' | 'inline' | 'chain', Round[]> = { raw: [], tunnel: [], inline: [], chain: [] };
    const fromApps = (port: number) => async () => {
      appsChild.child.stdin!.write(`${port}\n`);
      return (await appsChild.next<{ mibs: number }>()).mibs;
    };
    for (let i = 0; i < ROUNDS; i++) {
      runs.raw.push(await withCpu(pids, () => rawThroughput(client, server)));
      runs.tunnel.push(await withCpu(pids, fromApps(sinkForwardPort)));
      runs.inline.push(await withCpu(pids, () => tunnelThroughput(inlineForwardPort)));
      runs.chain.push(await withCpu(pids, fromApps(chainPort)));
    }
    const [raw, tunnel, inline, chain] = [runs.raw, runs.tunnel, runs.inline, runs.chain].map((rs) => rs.map((r) => r.value));
    const rawMiBs = median(raw);
    const tunnelMiBs = median(tunnel);
    const inlineMiBs = median(inline);
    const chainMiBs = median(chain);
    // CPU per MiB moved, by process: which side a series is bound by.
    const cpuPerMiB = (rs: Round[]) => pids.map((_, i) => r3(median(rs.map((r) => r.cpu[i]!)) / (TOTAL / MIB))).join(' / ');
    const totalCpuPerMiB = (rs: Round[]) => median(rs.map((r) => r.cpu.reduce((a, b) => a + b, 0))) / (TOTAL / MIB);
    console.log(`\n(a) throughput, ${TOTAL / MIB} MiB one way, median of ${ROUNDS} alternated rounds`);
    console.log(`  raw libp2p stream   ${r2(rawMiBs)} MiB/s   (rounds: ${raw.map(r2).join(', ')})`);
    console.log(`  tunnel              ${r2(tunnelMiBs)} MiB/s   (rounds: ${tunnel.map(r2).join(', ')})`);
    console.log(`  ratio tunnel/raw    ${r2(tunnelMiBs / rawMiBs)}x   (target >= 0.8x; the client and the sink in a process of neither node)`);
    console.log(`  tunnel, apps inside the nodes' processes   ${r2(inlineMiBs)} MiB/s = ${r2(inlineMiBs / rawMiBs)}x   (rounds: ${inline.map(r2).join(', ')})`);
    console.log(`  bare relay (plain TCP between the nodes, a socket pipe in each)   ${r2(chainMiBs)} MiB/s = ${r2(chainMiBs / rawMiBs)}x   (rounds: ${chain.map(r2).join(', ')})`);
    console.log(`  CPU ms per MiB, opener / provider / apps: raw ${cpuPerMiB(runs.raw)}; tunnel ${cpuPerMiB(runs.tunnel)}; apps inside ${cpuPerMiB(runs.inline)}; bare relay ${cpuPerMiB(runs.chain)}`);
    // What the tunnel costs a node beyond the raw stream, against what relaying costs at its barest.
    const perProcess = (rs: Round[], i: number) => median(rs.map((r) => r.cpu[i]!)) / (TOTAL / MIB);
    const added = (i: number) => `${r3(perProcess(runs.tunnel, i) - perProcess(runs.raw, i))} (bare relay ${r3(perProcess(runs.chain, i))})`;
    console.log(`  the tunnel's CPU per MiB over the raw stream's: opener ${added(0)}, provider ${added(1)}, apps ${added(2)}`);
    const [rawCpu, tunnelCpu] = [totalCpuPerMiB(runs.raw), totalCpuPerMiB(runs.tunnel)];
    console.log(`  CPU ms per MiB, all processes: raw ${r3(rawCpu)}, tunnel ${r3(tunnelCpu)}; raw/tunnel ${r2(rawCpu / tunnelCpu)}x on ${availableParallelism()} cores`);

    const rawEcho = await openEcho(client, server as unknown as DmsLibp2p);
    const frame = encodeFrame('x'.repeat(PAYLOAD - 3));
    const rawLat = await latencies(() => rawEcho.roundTrip(frame, PAYLOAD - 3));
    const viaTunnel = await tunnelEcho(echoForwardPort);
    const tunLat = await latencies(viaTunnel.roundTrip);
    viaTunnel.close();
    console.log(`\n(b) request-response, ${PAYLOAD} bytes, concurrency 1, ${SAMPLES} samples after ${WARMUP} warm-up`);
    console.log(`  raw libp2p stream   p50 ${r3(rawLat.p50)} ms   p99 ${r3(rawLat.p99)} ms`);
    console.log(`  tunnel              p50 ${r3(tunLat.p50)} ms   p99 ${r3(tunLat.p99)} ms`);
    console.log(`  added p50           +${r3(tunLat.p50 - rawLat.p50)} ms   ratio ${r2(tunLat.p50 / rawLat.p50)}x   (target <= +0.5 ms)`);
  } finally {
    for (const s of forwards) s.close();
    await client.stop();
    providerChild.child.stdin!.end();
    appsChild.child.stdin!.end();
  }
}

if (process.argv[2] === 'provider') await provider();
else if (process.argv[2] === 'apps') await apps();
else {
  if (/[ab]/.test(ONLY)) await main();
  if (ONLY.includes('c')) await ensemblePlacement(PLACEMENTS, 5);
}
