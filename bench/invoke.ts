/**
 * npm run bench:invoke — REST invoke throughput against a bare node:http baseline, in one run:
 *  (a) bare node:http JSON echo
 *  (b) POST /api/v1/actor/invoke of /public/hello with unsigned envelopes (node signs as operator)
 *  (c) the same with client-signed envelopes, unique nonces
 * autocannon, 16 connections. Targets: b/a >= 0.15, c/a >= 0.08.
 *
 * The cases are interleaved over several rounds and each ratio is the median of its rounds'
 * ratios, so load drift on a shared machine hits baseline and subject alike.
 */
import '../runtime/polyfills.js';
import { mkdirSync, writeFileSync } from 'node:fs';
import { KeyPair } from '../runtime/crypto/keys.js';
import { signEnvelopeSync } from '../runtime/crypto/signing.js';
import { msToNs, nowNs } from '../runtime/time.js';
import { encodeEnvelope, encodePayload, type Envelope } from '../runtime/wire/envelope.js';
import { removeHome, startNode } from '../test/helpers/node.js';
import { type Figures, measure, median, printTable, startEchoServer } from './lib/load.js';

const SECONDS = Number(process.env.BENCH_SECONDS ?? 5);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);
const CONNECTIONS = 16;
const headers = { 'content-type': 'application/json' };

const echo = await startEchoServer();
const node = await startNode();
const url = `${node.url}/api/v1/actor/invoke`;
const to = { id: node.did.slice('did:key:'.length), did: node.did, addr: { host: node.peerId, inbox: 'root' } };
const exp = () => nowNs() + msToNs(600_000);

// Unsigned: built on the fly; every request needs its own nonce (replay) and cont (one waiter per cont).
let n = 0;
const unsignedBody = () => {
  n++;
  return `{"to":{"addr":{"host":"${node.peerId}","inbox":"root"}},"be":"/public/hello","from":{"addr":{"host":"${node.peerId}","inbox":"bench"}},"nonce":${n},"opt":{"exp":${exp()},"cont":"/private/r/${n}"},"msg":"e30="}`;
};

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
};

const rounds: Record<'a' | 'b' | 'c', Figures>[] = [];
let perSecond = 4000;
for (let r = 0; r < ROUNDS; r++) {
  signBodies(Math.ceil(perSecond * (SECONDS + 2) * 2));
  const round = {} as Record<'a' | 'b' | 'c', Figures>;
  for (const key of ['a', 'b', 'c'] as const) round[key] = await measure(cases[key].name, cases[key].opts(), SECONDS, r === 0 ? 2 : 1);
  if (next > signed.length) console.log(`round ${r + 1}: signed bodies ran out (${next} > ${signed.length}); raise the batch`);
  perSecond = Math.max(perSecond, round.c.rps);
  rounds.push(round);
  console.log(`round ${r + 1}: a ${round.a.rps} req/s, b ${round.b.rps} req/s, c ${round.c.rps} req/s`);
}
echo.stop();
await node.stop();
removeHome(node.home);

const mid = (key: 'a' | 'b' | 'c'): Figures => {
  const sorted = [...rounds].sort((x, y) => x[key].rps - y[key].rps);
  return sorted[Math.floor(sorted.length / 2)][key];
};
console.log();
printTable([mid('a'), mid('b'), mid('c')]);
const ratios = {
  'b/a': median(rounds.map((r) => r.b.rps / r.a.rps)),
  'c/a': median(rounds.map((r) => r.c.rps / r.a.rps)),
};
console.log(`\nmedian of ${ROUNDS} rounds (${SECONDS} s per case per round):`);
console.log(`b/a = ${ratios['b/a'].toFixed(3)} (target >= 0.15: ${ratios['b/a'] >= 0.15 ? 'holds' : 'MISSED'})`);
console.log(`c/a = ${ratios['c/a'].toFixed(3)} (target >= 0.08: ${ratios['c/a'] >= 0.08 ? 'holds' : 'MISSED'})`);
mkdirSync(new URL('./results/', import.meta.url), { recursive: true });
writeFileSync(new URL('./results/invoke.json', import.meta.url), JSON.stringify({ at: new Date().toISOString(), seconds: SECONDS, rounds, ratios }, null, 2));
