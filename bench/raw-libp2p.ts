// Must precede libp2p: Node 20 lacks Promise.withResolvers.
import '../runtime/polyfills.js';
import { rawLibp2pRoundTrips } from './lib/raw-libp2p.js';

// Usage: node --import tsx bench/raw-libp2p.ts [requests] [payloadBytes] [process|same]
const [requests, payloadBytes] = process.argv.slice(2, 4).map(Number);
const server = process.argv[4] === 'same' ? 'same' : 'process';
const result = await rawLibp2pRoundTrips({ requests: requests || undefined, payloadBytes: payloadBytes || undefined, server });
console.log(
  `raw libp2p request/reply, echo ${server === 'same' ? 'in this process' : 'in another process'}, one reused stream, concurrency 1, ${result.payload_bytes}-byte frames, ${result.requests} requests: ` +
    `p50 ${result.p50_ms} ms, p99 ${result.p99_ms} ms, ${result.rps} req/s`,
);
console.log(JSON.stringify(result));
