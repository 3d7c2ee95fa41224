/**
 * npm run bench:tunnel — what `/dms/tunnel/1.0.0` costs against a raw libp2p stream between the
 * same two hosts (the node's own stack: TCP, Noise, Yamux; runtime/network/host.ts), in one run:
 *  (a) throughput: BENCH_TUNNEL_MB MiB sent one way, acknowledged by one byte at the end. Raw: over
 *      one libp2p stream to a sink protocol. Tunnel: a TCP client -> a local listener on the
 *      opener (as `dms jobs port-forward` makes) -> the tunnel -> the provider's TunnelServer ->
 *      a TCP sink (the job's port). Alternated in rounds; the median of each is compared (target >= 0.8x).
 *  (b) latency: 512-byte request-response round trips at concurrency 1. Raw: an echo protocol on
 *      one reused stream (test/helpers/libp2p-echo.ts). Tunnel: a TCP echo behind the same path
 *      as (a), over one kept connection. Added p50 = tunnel p50 - raw p50 (target <= +0.5 ms).
 * (c) placement: a 2-part ensemble on 2 node processes against one job on the other node
 *     (bench/lib/ensemble-placement.ts; target ensemble p50 <= 100 ms). BENCH_TUNNEL_ONLY=c (or
 *     a, b) runs only those parts; BENCH_TUNNEL_PLACEMENTS sets how many of each (default 30).
 * The provider runs in a child process, as the node running the job would: the opener's side
 * (its host, the forward listeners, the TCP clients) shares this one.
 * The tunnel path has two loopback TCP hops more than the raw one (client to listener, provider to
 * target): they are the real cost of the feature and are counted. No Docker: the target is a
 * local TCP server, so the figures are the tunnel's, not the container network's.
 */
import '../runtime/polyfills.js';
import { connect, createServer, type AddressInfo, type Server, type Socket } from 'node:net';
import { type ChildProcess, spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import type { PeerId, Stream } from '@libp2p/interface';
import { multiaddr } from '@multiformats/multiaddr';
import { KeyPair } from '../runtime/crypto/keys.js';
import { encodeFrame } from '../runtime/network/frames.js';
import { createHost, type DmsLibp2p } from '../runtime/network/host.js';
import { openTunnel, pipe, TunnelServer } from '../runtime/network/tunnel.js';
import { openEcho, serveEcho } from '../test/helpers/libp2p-echo.js';
import { ensemblePlacement } from './lib/ensemble-placement.js';

const MIB = 1024 * 1024;
const TOTAL = Number(process.env.BENCH_TUNNEL_MB ?? 64) * MIB;
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

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const r2 = (x: number) => Math.round(x * 100) / 100;
const r3 = (x: number) => Math.round(x * 1000) / 1000;

/**
 * The provider's side, in a process of its own as on a real network: its host, the tunnel
 * handler, the sink and echo protocols, and the job's two TCP ports. Prints its address, then
 * runs until its stdin closes.
 */
async function provider(): Promise<void> {
  const server = await createHost({ keyPair: KeyPair.generate() });
  const sink = sinkServer();
  const echo = createServer((s) => {
    s.setNoDelay(true);
    s.pipe(s);
    s.on('error', () => undefined);
  });
  const [sinkPort, echoPort] = await Promise.all([listen(sink), listen(echo)]);
  // The job's two ports: 1 is the sink, 2 the echo.
  await TunnelServer.attach(server, {
    authorize: async (_peer, req) => ({ host: '127.0.0.1', port: req.port === 1 ? sinkPort : echoPort }),
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
  await server.start();
  process.stdout.write(JSON.stringify({ addrs: server.getMultiaddrs().map(String) }) + '\n');
  process.stdin.resume();
  await new Promise((r) => process.stdin.once('end', r));
  sink.close();
  echo.close();
  await server.stop();
}

async function startProvider(): Promise<{ addrs: string[]; child: ChildProcess }> {
  // `node --cpu-prof --import tsx bench/tunnel.ts` profiles both sides: the child takes the flags.
  const child = spawn(process.execPath, [...process.execArgv.filter((a) => a.startsWith('--cpu-prof')), '--import', 'tsx', fileURLToPath(import.meta.url), 'provider'], { stdio: ['pipe', 'pipe', 'inherit'], env: process.env });
  const line = await new Promise<string>((resolve, reject) => {
    let out = '';
    child.stdout!.on('data', (d: Buffer) => {
      out += d.toString();
      if (out.includes('\n')) resolve(out.slice(0, out.indexOf('\n')));
    });
    child.once('exit', (code) => reject(new Error(`the provider exited with code ${code}`)));
  });
  return { addrs: (JSON.parse(line) as { addrs: string[] }).addrs, child };
}

async function main(): Promise<void> {
  const { addrs, child } = await startProvider();
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
  const [sinkForward, echoForward] = [forward(1), forward(2)];
  const [sinkForwardPort, echoForwardPort] = await Promise.all([listen(sinkForward), listen(echoForward)]);
  try {
    const raw: number[] = [];
    const tunnel: number[] = [];
    for (let i = 0; i < ROUNDS; i++) {
      raw.push(await rawThroughput(client, server));
      tunnel.push(await tunnelThroughput(sinkForwardPort));
    }
    const rawMiBs = median(raw);
    const tunnelMiBs = median(tunnel);
    console.log(`\n(a) throughput, ${TOTAL / MIB} MiB one way, median of ${ROUNDS} alternated rounds`);
    console.log(`  raw libp2p stream   ${r2(rawMiBs)} MiB/s   (rounds: ${raw.map(r2).join(', ')})`);
    console.log(`  tunnel              ${r2(tunnelMiBs)} MiB/s   (rounds: ${tunnel.map(r2).join(', ')})`);
    console.log(`  ratio tunnel/raw    ${r2(tunnelMiBs / rawMiBs)}x   (target >= 0.8x)`);

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
    for (const s of [sinkForward, echoForward]) s.close();
    await client.stop();
    child.stdin!.end();
  }
}

if (process.argv[2] === 'provider') await provider();
else {
  if (/[ab]/.test(ONLY)) await main();
  if (ONLY.includes('c')) await ensemblePlacement(PLACEMENTS, 5);
}
