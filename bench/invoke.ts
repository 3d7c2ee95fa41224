/**
 * npm run bench:invoke — REST invoke throughput against a bare node:http baseline, in one run:
 *  (a) bare node:http JSON echo
 *  (b) POST /api/v1/actor/invoke of /public/hello with unsigned envelopes (node signs as operator)
 *  (c) the same with client-signed envelopes, unique nonces
 * autocannon, 16 connections. Targets: b/a >= 0.15, c/a >= 0.08.
 */
import '../runtime/polyfills.js';
import { mkdirSync, writeFileSync } from 'node:fs';
import { KeyPair } from '../runtime/crypto/keys.js';
import { signEnvelopeSync } from '../runtime/crypto/signing.js';
import { msToNs, nowNs } from '../runtime/time.js';
import { encodeEnvelope, encodePayload, type Envelope } from '../runtime/wire/envelope.js';
import { removeHome, startNode } from '../test/helpers/node.js';
import { type Figures, measure, printTable, startEchoServer } from './lib/load.js';

const SECONDS = Number(process.env.BENCH_SECONDS ?? 8);
const CONNECTIONS = 16;
const headers = { 'content-type': 'application/json' };

const results: Figures[] = [];

const echo = await startEchoServer();
results.push(await measure('(a) bare node:http JSON echo', { url: echo.url, connections: CONNECTIONS, method: 'POST', body: '{"hello":"world"}', headers }, SECONDS));
echo.stop();

const node = await startNode({ env: { DMS_NETWORK_LISTEN_ADDRESSES: '/ip4/127.0.0.1/tcp/0' } });
const url = `${node.url}/api/v1/actor/invoke`;
const to = { id: node.did.slice(8), did: node.did, addr: { host: node.peerId, inbox: 'root' } };
const exp = () => nowNs() + msToNs(120_000);

// Unsigned: built on the fly; every request needs its own nonce (replay) and cont (one waiter per cont).
let n = 0;
const unsignedBody = () => {
  n++;
  return `{"to":{"addr":{"host":"${node.peerId}","inbox":"root"}},"be":"/public/hello","from":{"addr":{"host":"${node.peerId}","inbox":"bench"}},"nonce":${n},"opt":{"exp":${exp()},"cont":"/private/r/${n}"},"msg":"e30="}`;
};
results.push(
  await measure('(b) REST invoke, unsigned envelopes', { url, connections: CONNECTIONS, requests: [{ method: 'POST', headers, setupRequest: (r) => ({ ...r, body: unsignedBody() }) }] }, SECONDS),
);

// Signed: signing is the client's cost, so it is done before the clock starts.
const client = KeyPair.generate();
// Enough unique bodies for the signed case even if it ran at half the bare server's rate.
const needed = Math.ceil(Math.max(results[0].rps * 0.5, results[1].rps * 2, 2000) * (SECONDS + 2));
const bodies: string[] = new Array(needed);
for (let i = 0; i < needed; i++) {
  const env: Envelope = {
    to,
    be: '/public/hello',
    from: { id: client.id, did: client.did, addr: { host: node.peerId, inbox: 'bench-signed' } },
    nonce: BigInt(i + 1),
    opt: { exp: exp(), cont: `/private/r/${i}` },
    msg: encodePayload({}),
  };
  bodies[i] = encodeEnvelope(signEnvelopeSync(env, client));
}
let next = 0;
results.push(
  await measure(
    '(c) REST invoke, client-signed envelopes',
    { url, connections: CONNECTIONS, requests: [{ method: 'POST', headers, setupRequest: (r) => ({ ...r, body: bodies[next++ % needed] }) }] },
    SECONDS,
  ),
);
await node.stop();
removeHome(node.home);

printTable(results);
const [a, b, c] = results;
const ratios = { 'b/a': b.rps / a.rps, 'c/a': c.rps / a.rps };
console.log(`\nb/a = ${ratios['b/a'].toFixed(3)} (target >= 0.15: ${ratios['b/a'] >= 0.15 ? 'holds' : 'MISSED'})`);
console.log(`c/a = ${ratios['c/a'].toFixed(3)} (target >= 0.08: ${ratios['c/a'] >= 0.08 ? 'holds' : 'MISSED'})`);
if (next > needed) console.log(`warning: signed bodies wrapped around (${next} requests, ${needed} bodies); replays counted as non-2xx`);
mkdirSync(new URL('./results/', import.meta.url), { recursive: true });
writeFileSync(new URL('./results/invoke.json', import.meta.url), JSON.stringify({ at: new Date().toISOString(), seconds: SECONDS, results, ratios }, null, 2));
