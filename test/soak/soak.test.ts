/**
 * Soak: one real node process takes a mix of valid and hostile traffic for a bounded time
 * (DMS_SOAK_SECONDS, default 60), from REST and from a foreign libp2p peer, all on loopback.
 * The node must answer the valid traffic throughout, answer every hostile request with the
 * 4xx it deserves (never a 5xx), and keep its RSS under a stated bound.
 */
import { request as httpRequest } from 'node:http';
import { readFileSync } from 'node:fs';
import { multiaddr } from '@multiformats/multiaddr';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DmsClient } from '../../client/client.js';
import { KeyPair } from '../../runtime/crypto/keys.js';
import { silentLogger } from '../../runtime/log.js';
import { encodeFrame } from '../../runtime/network/frames.js';
import { ACTOR_PROTOCOL, Libp2pTransport } from '../../runtime/network/libp2p-transport.js';
import { msToNs, nextNonce, nowNs } from '../../runtime/time.js';
import { encodeEnvelope, encodePayload, type Envelope, U64_MAX } from '../../runtime/wire/envelope.js';
import { envelope, newCaller, rootOf, signEnvelopeSync } from '../helpers/envelopes.js';
import { listenAddr, waitFor } from '../helpers/network.js';
import { raw } from '../helpers/raw-http.js';
import { type NodeProcess, removeHome, startNode } from '../helpers/node.js';

const SECONDS = Number(process.env.DMS_SOAK_SECONDS ?? 60);
/** The bound the README states: a node under this mix stays well below it. */
const RSS_BOUND_MB = 600;
/**
 * The plateau: RSS in the last third of the run may exceed the highest RSS of the first two
 * thirds by at most this much. A leak proportional to traffic (about 1,000 requests a second
 * here) would keep climbing through the last third; a plateaued heap only swings with its
 * garbage collections, which a full run shows within a few tens of MB.
 */
const PLATEAU_MB = 64;
const WINDOW_MS = 5_000;

let node: NodeProcess;
let bare: Libp2pTransport;

beforeAll(async () => {
  node = await startNode({ timeoutMs: 45_000 });
  bare = await Libp2pTransport.create({ keyPair: KeyPair.generate(), listen: ['/ip4/127.0.0.1/tcp/0'], log: silentLogger() });
});
afterAll(async () => {
  await bare?.stop();
  await node?.stop();
  if (node) removeHome(node.home);
});

function rssMb(pid: number): number {
  const line = readFileSync(`/proc/${pid}/status`, 'utf8').split('\n').find((l) => l.startsWith('VmRSS:'));
  return Number(/(\d+)/.exec(line ?? '')?.[1] ?? 0) / 1024;
}

interface Answer {
  status: number;
  text: string;
}

/** A raw HTTP request, so the test controls every header a browser or attacker would (Host included). */
const send = (method: string, path: string, headers: Record<string, string>, body?: string): Promise<Answer> =>
  raw(`${node.url}${path}`, { method, headers, body });

/**
 * A body just over the limit, streamed (no Content-Length, so the node must count): the node
 * answers 413 once it has read past the limit and closes the connection. Writing little past
 * the limit lets the whole body be sent before that close, so the answer can be read.
 */
function oversized(path: string, bytes: number): Promise<Answer> {
  const url = new URL(node.url);
  return new Promise((resolve, reject) => {
    let answered = false;
    const req = httpRequest({ host: url.hostname, port: url.port, method: 'POST', path, headers: json, agent: false }, (res) => {
      answered = true;
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (d) => (text += d));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, text }));
    });
    req.on('error', (e: NodeJS.ErrnoException) => {
      if (answered) return;
      // The node may close the connection under a body it refused before the 413 is read:
      // the body was still not taken, which is what this attack must come to.
      if (e.code === 'EPIPE' || e.code === 'ECONNRESET') resolve({ status: CLOSED, text: e.code });
      else reject(e);
    });
    const chunk = Buffer.alloc(64 * 1024, 0x20);
    const pump = async () => {
      for (let sent = 0; sent < bytes && !answered && !req.destroyed; sent += chunk.length) {
        if (!req.write(chunk)) await new Promise((r) => req.once('drain', r));
      }
      if (!answered && !req.destroyed) req.end();
    };
    void pump();
  });
}

const json = { 'content-type': 'application/json' };
/** Status recorded when the node closed the connection instead of answering. */
const CLOSED = -1;

interface Hostile {
  name: string;
  /** Statuses this attack may get: each is a refusal of the attack for what it is. */
  expect: number[];
  send(): Promise<Answer>;
}

/** The REST attacks of the hardening issue, each a request that must be refused with a 4xx. */
function restAttacks(): Hostile[] {
  const attacker = newCaller(true);
  const hello = () => envelope(newCaller(false), { to: { id: '', did: '', addr: { host: '', inbox: 'root' } }, be: '/public/hello', cont: '/private/r' });
  const jobSpec = { name: 'evil', image: 'dms-test/busybox:latest', command: ['id'], resources: { cpu: { cores: 0.1 }, memory: { size: 16_777_216 } } };
  const replayed = encodeEnvelope(envelope(attacker, { to: rootOf(node.peerId), be: '/public/hello', cont: '/private/replay', ttlMs: 600_000 }));
  let replayedOnce = false;
  return [
    { name: 'text/plain job submission (no preflight)', expect: [415], send: () => send('POST', '/api/v1/jobs', { 'content-type': 'text/plain' }, JSON.stringify(jobSpec)) },
    {
      name: 'unsigned envelope from a foreign origin',
      expect: [403],
      send: () => send('POST', '/api/v1/actor/invoke', { ...json, origin: 'http://evil.example' }, encodeEnvelope(hello())),
    },
    {
      name: 'unsigned envelope from a browser on an allowed origin',
      expect: [403],
      send: () => send('POST', '/api/v1/actor/invoke', { ...json, origin: 'http://localhost:9991', 'sec-fetch-site': 'cross-site', 'sec-fetch-mode': 'cors' }, encodeEnvelope(hello())),
    },
    { name: 'DNS-rebound Host', expect: [403], send: () => send('GET', '/api/v1/actor/handle', { host: 'evil.example:9999' }) },
    { name: 'malformed JSON', expect: [400], send: () => send('POST', '/api/v1/actor/invoke', json, '{"to":') },
    {
      name: 'opt.exp at 2^64-1',
      expect: [400],
      send: () => send('POST', '/api/v1/actor/send', json, encodeEnvelope(envelope(newCaller(true), { to: rootOf(node.peerId), be: '/public/hello', exp: U64_MAX }))),
    },
    {
      name: 'replayed envelope',
      expect: [200, 400],
      send: async () => {
        const a = await send('POST', '/api/v1/actor/invoke', json, replayed);
        // Only the first copy is ever delivered; a later copy answered 200 is a replay let through.
        if (replayedOnce && a.status === 200) return { status: 0, text: `replay delivered: ${a.text}` };
        replayedOnce = true;
        return a;
      },
    },
    {
      name: 'bad signature',
      expect: [400],
      send: () => {
        const env = envelope(newCaller(true), { to: rootOf(node.peerId), be: '/public/hello', cont: '/private/r' });
        env.sig = Uint8Array.from(env.sig!, (b, i) => (i === 3 ? b ^ 0x55 : b));
        return send('POST', '/api/v1/actor/invoke', json, encodeEnvelope(env));
      },
    },
    { name: 'body over the limit', expect: [413, CLOSED], send: () => oversized('/api/v1/actor/send', 1024 * 1024 + 128 * 1024) },
    {
      name: 'image that walks the Docker API',
      expect: [400],
      send: () => send('POST', '/api/v1/jobs', json, JSON.stringify({ ...jobSpec, image: '../../containers/json?all=1#' })),
    },
    { name: 'image //x/y', expect: [400], send: () => send('POST', '/api/v1/jobs', json, JSON.stringify({ ...jobSpec, image: '//x/y' })) },
    { name: '200-character job id', expect: [400, 404], send: () => send('GET', `/api/v1/jobs/${'a'.repeat(200)}`, {}) },
    { name: 'broadcast without a topic', expect: [400], send: () => send('POST', '/api/v1/actor/broadcast', json, encodeEnvelope(hello())) },
    {
      name: 'envelope whose from.addr.host is another node',
      expect: [400],
      send: () => {
        const env = envelope(newCaller(true), { to: rootOf(node.peerId), be: '/public/hello', host: KeyPair.generate().peerId });
        return send('POST', '/api/v1/actor/send', json, encodeEnvelope(env));
      },
    },
  ];
}

describe(`soak: ${SECONDS} s of valid and hostile traffic`, () => {
  it('answers valid traffic throughout, refuses every attack with a 4xx, and stays under its RSS bound', { timeout: SECONDS * 1000 + 120_000 }, async () => {
    const started = Date.now();
    const deadline = started + SECONDS * 1000;
    const running = () => Date.now() < deadline;
    const windows = new Map<number, { ok: number; failed: number }>();
    const windowOf = () => {
      const w = Math.floor((Date.now() - started) / WINDOW_MS);
      let s = windows.get(w);
      if (!s) windows.set(w, (s = { ok: 0, failed: 0 }));
      return s;
    };
    const validLatencies: number[] = [];
    const validFailures: string[] = [];
    const unexpected: string[] = [];
    let hostileSent = 0;
    let netSent = 0;
    let rssMax = 0;
    const rssSamples: number[] = [];

    // Valid traffic: local tool invokes (unsigned, loopback), signed invokes, and null jobs.
    const local = new DmsClient({ url: node.url, timeoutMs: 10_000 });
    const signer = new DmsClient({ url: node.url, key: KeyPair.generate(), timeoutMs: 10_000 });
    const valid = async (what: string, call: () => Promise<unknown>) => {
      const t0 = performance.now();
      try {
        await call();
        validLatencies.push(performance.now() - t0);
        windowOf().ok++;
      } catch (e) {
        windowOf().failed++;
        validFailures.push(`${what}: ${(e as Error).message}`);
      }
    };
    const validLoop = async () => {
      let i = 0;
      while (running()) {
        await valid('unsigned hello', () => local.invoke('root', '/public/hello', {}, { raw: true }));
        await valid('signed hello', () => signer.invoke('root', '/public/hello', {}, { raw: true }));
        if (i++ % 10 === 0) {
          await valid('null job', async () => {
            const res = await fetch(`${node.url}/api/v1/jobs`, {
              method: 'POST',
              headers: json,
              body: JSON.stringify({ name: 'soak', image: 'none', executor: 'null', command: [], resources: { cpu: { cores: 0.1 }, memory: { size: 16_777_216 } } }),
            });
            if (res.status !== 201) throw new Error(`submit: HTTP ${res.status} ${await res.text()}`);
          });
        }
      }
    };

    const hostileLoop = async () => {
      const attacks = restAttacks();
      let i = 0;
      while (running()) {
        const attack = attacks[i++ % attacks.length];
        hostileSent++;
        try {
          const a = await attack.send();
          if (a.status >= 500 || !attack.expect.includes(a.status)) unexpected.push(`${attack.name}: HTTP ${a.status} ${a.text.slice(0, 200)}`);
        } catch (e) {
          unexpected.push(`${attack.name}: ${(e as Error).message}`);
        }
      }
    };

    // The foreign peer: junk frames, forged and far-expiring envelopes, replays, spoofed hosts,
    // junk gossip; and honest hellos, whose replies must keep coming.
    const honestSent: bigint[] = [];
    const answered = new Set<string>();
    bare.onEnvelope((env) => {
      if (env.be.startsWith('/private/soak/')) answered.add(env.be);
    });
    const netLoop = async () => {
      const stream = await bare.node.dialProtocol(multiaddr(listenAddr(node)), ACTOR_PROTOCOL);
      const key = KeyPair.generate();
      const make = (over: Partial<Envelope> & { exp?: bigint; cont?: string; host?: string }): Envelope =>
        signEnvelopeSync(
          {
            to: rootOf(node.peerId),
            be: '/public/hello',
            from: { id: key.id, did: key.did, addr: { host: over.host ?? bare.host, inbox: 'soak' } },
            nonce: nextNonce(),
            opt: { exp: over.exp ?? nowNs() + msToNs(10_000), ...(over.cont ? { cont: over.cont } : {}) },
            msg: encodePayload({}),
          },
          key,
        );
      let i = 0;
      while (running()) {
        const kind = i++ % 6;
        netSent++;
        if (kind === 0) {
          stream.send(encodeFrame(`{"junk":${i},`));
        } else if (kind === 1) {
          const env = make({});
          env.sig = Uint8Array.from(env.sig!, (b, j) => (j === 0 ? b ^ 0xff : b));
          stream.send(encodeFrame(encodeEnvelope(env)));
        } else if (kind === 2) {
          stream.send(encodeFrame(encodeEnvelope(make({ exp: U64_MAX, cont: '/private/far' }))));
        } else if (kind === 3) {
          const env = encodeEnvelope(make({ cont: '/private/replayed' }));
          stream.send(encodeFrame(env));
          stream.send(encodeFrame(env));
        } else if (kind === 4) {
          stream.send(encodeFrame(encodeEnvelope(make({ host: node.peerId, cont: '/dms/device/config' }))));
          await bare.node.services.pubsub.publish('/dms/hello', new TextEncoder().encode(`{"junk":${i}}`)).catch(() => {});
        } else {
          const env = make({ cont: `/private/soak/${i}` });
          honestSent.push(env.nonce);
          stream.send(encodeFrame(encodeEnvelope(env)));
        }
        await new Promise((r) => setTimeout(r, 5));
      }
      return stream;
    };

    const rssLoop = async () => {
      while (running()) {
        const mb = rssMb(node.pid);
        rssSamples.push(mb);
        rssMax = Math.max(rssMax, mb);
        await new Promise((r) => setTimeout(r, 1_000));
      }
    };

    const [, , stream] = await Promise.all([validLoop(), hostileLoop(), netLoop(), rssLoop(), hostileLoop()]);
    // Every honest network hello is answered, even among the junk (allow the last ones to arrive).
    await waitFor('replies to the honest network hellos', () => answered.size >= honestSent.length, { timeoutMs: 20_000 });
    await stream.close();

    const sorted = [...validLatencies].sort((a, b) => a - b);
    const pct = (p: number) => sorted[Math.min(sorted.length - 1, Math.floor(p * sorted.length))]?.toFixed(1);
    const third = Math.floor(rssSamples.length / 3);
    const earlier = Math.max(...rssSamples.slice(0, 2 * third));
    const last = Math.max(...rssSamples.slice(2 * third));
    console.log(
      `soak ${SECONDS} s: valid ${validLatencies.length} ok / ${validFailures.length} failed (p50 ${pct(0.5)} ms, p99 ${pct(0.99)} ms); ` +
        `hostile REST ${hostileSent}, unexpected ${unexpected.length}; network frames ${netSent}, honest hellos answered ${answered.size}/${honestSent.length}; ` +
        `RSS max ${rssMax.toFixed(0)} MB (first ${rssSamples[0]?.toFixed(0)} MB, last ${rssSamples.at(-1)?.toFixed(0)} MB, bound ${RSS_BOUND_MB} MB); ` +
        `RSS max in the first two thirds ${earlier.toFixed(0)} MB, in the last third ${last.toFixed(0)} MB (plateau bound +${PLATEAU_MB} MB); ` +
        `samples every 10 s: ${rssSamples.filter((_, i) => i % 10 === 0).map((m) => m.toFixed(0)).join(' ')}`,
    );

    expect(unexpected.slice(0, 10)).toEqual([]);
    expect(validFailures.slice(0, 10)).toEqual([]);
    // Throughout: every full window of the run answered valid traffic.
    const full = Math.floor((SECONDS * 1000) / WINDOW_MS);
    for (let w = 0; w < full; w++) expect(windows.get(w)?.ok ?? 0, `valid answers in window ${w}`).toBeGreaterThan(0);
    expect(rssMax).toBeLessThan(RSS_BOUND_MB);
    // It plateaus: the last third climbs no higher than a GC swing above the first two.
    expect(rssSamples.length).toBeGreaterThanOrEqual(SECONDS / 2);
    expect(last - earlier, `RSS grew from at most ${earlier.toFixed(0)} MB to ${last.toFixed(0)} MB in the last third`).toBeLessThan(PLATEAU_MB);
    expect((await fetch(`${node.url}/health`)).status).toBe(200);
  });
});
