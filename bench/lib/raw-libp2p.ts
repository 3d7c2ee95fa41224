import { spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { multiaddr, type Multiaddr } from '@multiformats/multiaddr';
import { KeyPair } from '../../runtime/crypto/keys.js';
import { encodeFrame } from '../../runtime/network/frames.js';
import { createHost, type DmsLibp2p } from '../../runtime/network/host.js';
import { openEcho, serveEcho } from '../../test/helpers/libp2p-echo.js';

/**
 * The floor under DMS's network figures: request/reply over the very libp2p stack the node
 * runs (TCP, Noise, Yamux, same services), on one reused stream, with no envelopes, actors
 * or signatures. Whatever `bench:net` measures above this is DMS's own cost.
 */

export interface RawLibp2pOptions {
  /** Measured round trips (default 5000). */
  requests?: number;
  /** Round trips run first and not measured, so JIT and connection warm-up stay out (default 500). */
  warmup?: number;
  /** Bytes in each request frame, about a small signed envelope by default (512). */
  payloadBytes?: number;
  /**
   * Where the echo host runs: in a process of its own (`'process'`, the default), as the other
   * node of a cross-node invoke does, so each round trip wakes the other process and then this
   * one; or in this process (`'same'`), where the reply is read by the event loop that sent the
   * request, with no process woken (a floor no two nodes can reach).
   */
  server?: 'process' | 'same';
}

export interface RawLibp2pResult {
  p50_ms: number;
  p99_ms: number;
  /** Round trips per second at concurrency 1. */
  rps: number;
  requests: number;
  payload_bytes: number;
}

export async function rawLibp2pRoundTrips(opts: RawLibp2pOptions = {}): Promise<RawLibp2pResult> {
  const requests = opts.requests ?? 5_000;
  const warmup = opts.warmup ?? 500;
  const payloadBytes = opts.payloadBytes ?? 512;
  const server = opts.server === 'same' ? await sameProcessServer() : await echoProcess();
  const client = await createHost({ keyPair: KeyPair.generate() });
  try {
    await client.start();
    const echo = await openEcho(client, server.addrs);
    const frame = encodeFrame('x'.repeat(payloadBytes));
    const roundTrip = () => echo.roundTrip(frame, payloadBytes);

    for (let i = 0; i < warmup; i++) await roundTrip();
    const latencies = new Float64Array(requests);
    const started = performance.now();
    for (let i = 0; i < requests; i++) {
      const t0 = performance.now();
      await roundTrip();
      latencies[i] = performance.now() - t0;
    }
    const elapsedMs = performance.now() - started;
    latencies.sort();
    return {
      p50_ms: round(percentile(latencies, 0.5)),
      p99_ms: round(percentile(latencies, 0.99)),
      rps: Math.round((requests / elapsedMs) * 1000),
      requests,
      payload_bytes: payloadBytes,
    };
  } finally {
    await Promise.all([client.stop(), server.stop()]);
  }
}

interface EchoServer {
  addrs: Multiaddr[];
  stop(): Promise<void>;
}

/** A bare host of the node's stack serving the echo protocol, started: this process's, or ./echo-host.ts's. */
export async function startEchoHost(): Promise<DmsLibp2p> {
  const host = await createHost({ keyPair: KeyPair.generate() });
  await serveEcho(host);
  await host.start();
  return host;
}

async function sameProcessServer(): Promise<EchoServer> {
  const host = await startEchoHost();
  return { addrs: host.getMultiaddrs(), stop: async () => host.stop() };
}

/** ./echo-host.ts in a child process; resolves with its addresses once it listens. */
async function echoProcess(): Promise<EchoServer> {
  const child = spawn(process.execPath, ['--import', 'tsx', fileURLToPath(new URL('./echo-host.ts', import.meta.url))], { stdio: ['pipe', 'pipe', 'inherit'] });
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const line = await Promise.race([
    createInterface({ input: child.stdout! })[Symbol.asyncIterator]().next(),
    exited.then(() => ({ done: true, value: undefined })),
    new Promise<never>((_, reject) => setTimeout(() => reject(new Error('the echo host did not print its addresses within 20 s')), 20_000).unref()),
  ]);
  if (line.done || !line.value) throw new Error(`the echo host exited before it listened (code ${child.exitCode})`);
  const { addrs } = JSON.parse(line.value) as { addrs: string[] };
  return {
    addrs: addrs.map((a) => multiaddr(a)),
    stop: async () => {
      child.stdin!.end();
      const timer = setTimeout(() => child.kill('SIGKILL'), 5_000);
      await exited;
      clearTimeout(timer);
    },
  };
}

const percentile = (sorted: Float64Array, q: number): number => sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))];
const round = (ms: number): number => Math.round(ms * 1000) / 1000;
