import { KeyPair } from '../../runtime/crypto/keys.js';
import { encodeFrame } from '../../runtime/network/frames.js';
import { createHost } from '../../runtime/network/host.js';
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
  const [server, client] = await Promise.all([createHost({ keyPair: KeyPair.generate() }), createHost({ keyPair: KeyPair.generate() })]);
  try {
    await serveEcho(server);
    await Promise.all([server.start(), client.start()]);
    const echo = await openEcho(client, server);
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

const percentile = (sorted: Float64Array, q: number): number => sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))];
const round = (ms: number): number => Math.round(ms * 1000) / 1000;
