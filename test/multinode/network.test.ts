import { multiaddr } from '@multiformats/multiaddr';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DmsClient } from '../../client/client.js';
import { KeyPair } from '../../runtime/crypto/keys.js';
import { verifyEnvelope } from '../../runtime/crypto/signing.js';
import { encodeFrame } from '../../runtime/network/frames.js';
import { ACTOR_PROTOCOL, Libp2pTransport } from '../../runtime/network/libp2p-transport.js';
import { silentLogger } from '../../runtime/log.js';
import { msToNs, nextNonce, nowNs } from '../../runtime/time.js';
import { decodePayload, encodeEnvelope, encodePayload, type Envelope, envelopeFromJson, parseEnvelope, parseJsonLossless } from '../../runtime/wire/envelope.js';
import { envelope, newCaller, post, rootOf, signEnvelopeSync } from '../helpers/envelopes.js';
import { DevEvents, nonceOf, listenAddr, startCluster, stopCluster, waitFor } from '../helpers/network.js';
import { type NodeProcess, runCli } from '../helpers/node.js';

// Three real nodes on loopback; 2 and 3 join through 1. Debug mode opens the dev event
// stream, which is how these tests see deliveries and dead letters on a remote node.
let nodes: NodeProcess[] = [];
let n1: NodeProcess;
let n3: NodeProcess;

beforeAll(async () => {
  nodes = await startCluster(3, { env: { DMS_DEBUG: 'true' } });
  [n1, , n3] = nodes;
});
afterAll(() => stopCluster(nodes));

const api = (node: NodeProcess, path: string) => `${node.url}/api/v1/actor/${path}`;
const others = (node: NodeProcess) => nodes.filter((n) => n !== node);

/** Invokes a root behavior of `node` through its own REST interface (unsigned: loopback is trusted). */
const ask = <T>(node: NodeProcess, be: string, payload: unknown = {}) =>
  new DmsClient({ url: node.url, timeoutMs: 20_000 }).invoke<T>('root', be, payload, { raw: true });

interface PeerList {
  peers: string[];
  dids: Record<string, string>;
}

describe('discovery across three nodes', () => {
  it('every node lists the other two, with the DID each gave in the hello exchange', async () => {
    const lists = await waitFor('every node to list and know the other two', async () => {
      const all = await Promise.all(nodes.map(async (n) => (await ask<PeerList>(n, '/dms/node/peers/list')).payload));
      const complete = nodes.every((n, i) => others(n).every((o) => all[i].peers.includes(o.peerId) && all[i].dids[o.peerId] === o.did));
      return complete && all;
    });
    for (const [i, list] of lists.entries()) expect(list.peers.sort()).toEqual(others(nodes[i]).map((o) => o.peerId).sort());
    // The same view is the discovery actor's own, at its inbox.
    const client = new DmsClient({ url: n1.url });
    const direct = await client.invoke<PeerList>({ inbox: 'discovery' }, '/dms/node/peers/list');
    expect(direct.payload.peers.sort()).toEqual(lists[0].peers.sort());
    expect(direct.env.from.addr.inbox).toBe('discovery');
  });

  it('peers/self answers the real listen addresses, the ones in node.json', async () => {
    const self = (await ask<{ id: string; did: string; addrs: string[] }>(n3, '/dms/node/peers/self')).payload;
    expect(self.id).toBe(n3.peerId);
    expect(self.did).toBe(n3.did);
    expect(self.addrs).toContain(listenAddr(n3));
    for (const a of self.addrs) expect(a).toMatch(new RegExp(`^/ip4/127\\.0\\.0\\.1/tcp/[1-9]\\d*/p2p/${n3.peerId}$`));
  });

  it('peers/ping measures a peer and names the problem with a bad or unknown host', async () => {
    const pong = await ask<{ rtt_ms: number }>(n1, '/dms/node/peers/ping', { host: n3.peerId });
    expect(pong.error).toBeUndefined();
    // Milliseconds, not a speed claim (bench:net measures the network): a ping gives up at the
    // 5 s dial timeout, so a slow machine fails the ping rather than this bound.
    expect(pong.payload.rtt_ms).toBeGreaterThanOrEqual(0);
    expect(pong.payload.rtt_ms).toBeLessThan(5_000);

    const malformed = await ask(n1, '/dms/node/peers/ping', { host: 'not-a-peer' });
    expect(malformed.error).toMatch(/invalid payload for \/dms\/node\/peers\/ping: host: must be a libp2p peer id/);
    const missing = await ask(n1, '/dms/node/peers/ping', {});
    expect(missing.error).toMatch(/host is required/);
    expect((await ask(n1, '/dms/node/peers/ping', { host: n1.peerId })).error).toMatch(/is this node/);
    const stranger = KeyPair.generate().peerId;
    expect((await ask(n1, '/dms/node/peers/ping', { host: stranger })).error).toContain(stranger);
  });

  // Each command is a process start: on a busy machine that is seconds, so they run side by side.
  it('dms peers list|self|ping drive the discovery actor, as text and as --json', { timeout: 90_000 }, async () => {
    await waitFor('node 1 to know node 3', async () => (await ask<PeerList>(n1, '/dms/node/peers/list')).payload.dids[n3.peerId] === n3.did);
    const [list, text, self, ping, bad, badAddr] = await Promise.all([
      runCli(['--home', n1.home, '--json', 'peers', 'list']),
      runCli(['--home', n1.home, 'peers', 'list', '--wide']),
      runCli(['--home', n3.home, 'peers', 'self']),
      runCli(['--home', n1.home, '--json', 'peers', 'ping', n3.peerId]),
      runCli(['--home', n1.home, 'peers', 'ping', 'nope']),
      runCli(['--home', n1.home, 'peers', 'connect', 'not-a-multiaddr']),
    ]);
    expect(list.code, list.stderr).toBe(0);
    const parsed = JSON.parse(list.stdout) as PeerList;
    expect(parsed.peers.sort()).toEqual(others(n1).map((o) => o.peerId).sort());
    expect(parsed.dids[n3.peerId]).toBe(n3.did);

    expect(text.code, text.stderr).toBe(0);
    expect(text.stdout).toContain(`${n3.peerId}  ${n3.did}`);

    expect(self.code, self.stderr).toBe(0);
    expect(self.stdout).toContain(`peer id: ${n3.peerId}`);
    expect(self.stdout).toContain(listenAddr(n3));

    expect(ping.code, ping.stderr).toBe(0);
    expect(JSON.parse(ping.stdout)).toMatchObject({ peer: n3.peerId, rtt_ms: expect.any(Number) });

    expect(bad.code).toBe(1);
    expect(bad.stderr).toMatch(/^dms: .*host: must be a libp2p peer id/);
    expect(badAddr.code).toBe(1);
    expect(badAddr.stderr).toMatch(/address: must be a multiaddr/);
  });
});

describe('messages across nodes (REST on node 1)', () => {
  it('an invoke reaches node 3 and its signed reply verifies', async () => {
    const caller = newCaller();
    const req = envelope(caller, { to: rootOf(n3.peerId), be: '/public/hello', cont: '/private/reply/x', host: n1.peerId, ttlMs: 10_000 });
    const res = await post(api(n1, 'invoke'), encodeEnvelope(req));
    expect(res.status, res.text).toBe(200);
    const reply = parseEnvelope(res.text);
    await verifyEnvelope(reply);
    expect(reply.from.did).toBe(n3.did);
    expect(reply.from.addr).toEqual({ host: n3.peerId, inbox: 'root' });
    expect(reply.to).toEqual(req.from);
    expect(reply.be).toBe('/private/reply/x');
    expect(reply.opt.exp).toBe(req.opt.exp);
    expect(decodePayload(reply.msg)).toEqual({ did: n3.did });
  });

  it('an invoke to an inbox node 3 does not have is answered at once with the reason', { timeout: 90_000 }, async () => {
    const TTL_MS = 60_000;
    const caller = newCaller();
    const to = { id: '', did: '', addr: { host: n3.peerId, inbox: 'nobody' } };
    const req = envelope(caller, { to, be: '/public/hello', cont: '/private/reply/y', host: n1.peerId, ttlMs: TTL_MS });
    const started = Date.now();
    const res = await post(api(n1, 'invoke'), encodeEnvelope(req));
    expect(res.status, res.text).toBe(200);
    const reply = parseEnvelope(res.text);
    await verifyEnvelope(reply);
    expect(reply.from.addr.host).toBe(n3.peerId);
    expect(decodePayload(reply.msg)).toEqual({ error: "no actor with inbox 'nobody' on this node", kind: 'not_found' });
    // Long before opt.exp (a timeout would take the whole TTL); the margin is for a loaded machine.
    expect(Date.now() - started).toBeLessThan(TTL_MS / 3);
  });

  it('a send reaches node 3, which delivers it to its root actor', async () => {
    const watch = await DevEvents.open(n3.url, ['envelope']);
    try {
      const req = envelope(newCaller(), { to: rootOf(n3.peerId), be: '/public/hello', host: n1.peerId, ttlMs: 10_000 });
      const res = await post(api(n1, 'send'), encodeEnvelope(req));
      expect(res.status, res.text).toBe(200);
      expect(res.json).toEqual({ message: 'message sent' });
      const delivered = await watch.waitFor('the send at node 3', (e) => nonceOf(e) === String(req.nonce));
      expect(delivered).toMatchObject({ type: 'envelope', direction: 'in', actor: 'root', behavior: '/public/hello' });
    } finally {
      watch.close();
    }
  });

  it('a broadcast with ?limit=3 gets replies from all three nodes, as soon as they arrive', { timeout: 120_000 }, async () => {
    const broadcast = async (ttlMs: number) => {
      const req = envelope(newCaller(), { be: '/broadcast/hello', topic: '/dms/hello', cont: `/private/b/${nextNonce()}`, host: n1.peerId, ttlMs });
      const started = Date.now();
      const res = await post(`${api(n1, 'broadcast')}?limit=3`, encodeEnvelope(req));
      expect(res.status, res.text).toBe(200);
      const replies = (parseJsonLossless(res.text) as unknown[]).map(envelopeFromJson);
      return { replies, elapsed: Date.now() - started };
    };
    // Gossipsub builds its mesh over a few heartbeats after peers connect: retry until it spans all three.
    await waitFor('a broadcast to reach all three nodes', async () => (await broadcast(2_000)).replies.length === 3, { timeoutMs: 40_000 });
    const TTL_MS = 60_000;
    const { replies, elapsed } = await broadcast(TTL_MS);
    expect(replies).toHaveLength(3);
    for (const r of replies) await verifyEnvelope(r);
    expect(replies.map((r) => r.from.did).sort()).toEqual(nodes.map((n) => n.did).sort());
    for (const r of replies) expect(decodePayload(r.msg)).toEqual({ did: r.from.did });
    // limit=3 returns on the third reply, long before opt.exp (the margin is for a loaded machine).
    expect(elapsed).toBeLessThan(TTL_MS / 3);
  });
});

describe('a bare libp2p peer', () => {
  let bare: Libp2pTransport;
  const arrived: Envelope[] = [];

  beforeAll(async () => {
    bare = await Libp2pTransport.create({ keyPair: KeyPair.generate(), listen: ['/ip4/127.0.0.1/tcp/0'], log: silentLogger() });
    bare.onEnvelope((env) => arrived.push(env));
  });
  afterAll(() => bare?.stop());

  it('is reached by dms peers connect, and greeted with a hello from node 1', { timeout: 60_000 }, async () => {
    const r = await runCli(['--home', n1.home, '--json', 'peers', 'connect', bare.addrs()[0]]);
    expect(r.code, r.stderr).toBe(0);
    expect(JSON.parse(r.stdout)).toEqual({ peer: bare.host });
    // Listed once connected. Read before the hello: in two clean-clone runs of 2026-11-27 the
    // connection was gone on both sides by the time the hello had arrived, node 1 warning of
    // nothing. Most likely libp2p's ping monitor, which then gave a connection up after 5 s
    // without an answer (a stall of either process on a loaded machine) and said so only under
    // DEBUG: it now waits 20 s, and a connection closed on an error is logged (stalled-peer.test).
    const connected = (await ask<PeerList>(n1, '/dms/node/peers/list')).payload;
    expect(connected.peers, `the bare peer's connections: ${JSON.stringify(bare.peers())}`).toContain(bare.host);
    const hello = await waitFor('the hello exchange from node 1', () => arrived.find((e) => e.be === '/public/hello'));
    expect(hello.from.addr.host).toBe(n1.peerId);
    expect(hello.to.addr).toEqual({ host: bare.host, inbox: 'root' });
    expect(hello.opt.cont).toBeTruthy();
    const list = (await ask<PeerList>(n1, '/dms/node/peers/list')).payload;
    // It never answered, so it has no DID on record.
    expect(list.dids[bare.host]).toBeUndefined();
  });

  it('cannot inject forged envelopes: a bad signature or a from.addr.host not its own is dropped', async () => {
    const key = KeyPair.generate();
    const forge = (cont: string, host: string, sign: (env: Envelope) => Envelope): Envelope =>
      sign({
        to: rootOf(n1.peerId),
        be: '/public/hello',
        from: { id: key.id, did: key.did, addr: { host, inbox: 'forger' } },
        nonce: nextNonce(),
        opt: { exp: nowNs() + msToNs(30_000), cont },
        msg: encodePayload({}),
      });
    const honest = forge('/private/r/honest', bare.host, (e) => signEnvelopeSync(e, key));
    const badSig = forge('/private/r/badsig', bare.host, (e) => {
      const signed = signEnvelopeSync(e, key);
      signed.sig = Uint8Array.from(signed.sig!, (b, i) => (i === 0 ? b ^ 0xff : b));
      return signed;
    });
    // Correctly signed by its author, but claiming to come from node 3's host: replies would go there.
    const spoofed = forge('/private/r/spoofed', n3.peerId, (e) => signEnvelopeSync(e, key));

    const watch = await DevEvents.open(n1.url, ['dead-letter']);
    try {
      const stream = await bare.node.dialProtocol(multiaddr(listenAddr(n1)), ACTOR_PROTOCOL);
      for (const env of [badSig, spoofed, honest]) stream.send(encodeFrame(encodeEnvelope(env)));

      const dropped = (env: Envelope) => watch.waitFor(`the dead letter of ${env.opt.cont}`, (e) => nonceOf(e) === String(env.nonce));
      expect(await dropped(badSig)).toMatchObject({ type: 'dead-letter', reason: 'sig: signature does not verify' });
      expect(await dropped(spoofed)).toMatchObject({ type: 'dead-letter', reason: `from.addr.host ${n3.peerId} is not the sending peer ${bare.host}` });
      // The honest one, on the same stream, is answered: the stream works, so silence means refusal.
      const reply = await waitFor('the reply to the honest envelope', () => arrived.find((e) => e.be === '/private/r/honest'));
      await verifyEnvelope(reply);
      expect(reply.from.did).toBe(n1.did);
      expect(arrived.filter((e) => e.be === '/private/r/badsig' || e.be === '/private/r/spoofed')).toEqual([]);
      expect(watch.find((e) => nonceOf(e) === String(honest.nonce))).toBeUndefined();
      await stream.close();
    } finally {
      watch.close();
    }
    // Still healthy: REST answers and the network path still carries invokes.
    expect((await fetch(`${n1.url}/health`)).status).toBe(200);
    const again = await ask<{ did: string }>(n1, '/public/hello');
    expect(again.payload).toEqual({ did: n1.did });
  });
});
