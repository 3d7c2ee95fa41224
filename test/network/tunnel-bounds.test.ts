/**
 * The tunnel protocol's bounds on two bare hosts of the node's stack (no node, no Docker): the
 * total across peers, the wait for a header, and the idle timeout. The target is a local TCP
 * echo standing in for a job's port.
 */
import { createServer, connect, type AddressInfo, type Server, type Socket } from 'node:net';
import type { Stream } from '@libp2p/interface';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { KeyPair } from '../../runtime/crypto/keys.js';
import { createHost, type DmsLibp2p } from '../../runtime/network/host.js';
import { encodeFrame } from '../../runtime/network/frames.js';
import { openTunnel, pipe, TUNNEL_PROTOCOL, TunnelServer } from '../../runtime/network/tunnel.js';
import { waitFor } from '../helpers/network.js';

const JOB = '00000000-0000-4000-8000-000000000001';
const warnings: string[] = [];
const log = { warn: (_f: Record<string, unknown>, msg: string) => void warnings.push(msg), debug: () => undefined };

describe('tunnel bounds', { timeout: 30_000 }, () => {
  let provider: DmsLibp2p;
  let openers: DmsLibp2p[];
  let echo: Server;
  let tunnels: TunnelServer;

  beforeAll(async () => {
    echo = createServer((s) => {
      s.pipe(s);
      s.on('error', () => undefined);
    });
    await new Promise<void>((r) => echo.listen(0, '127.0.0.1', r));
    const port = (echo.address() as AddressInfo).port;
    provider = await createHost({ keyPair: KeyPair.generate() });
    tunnels = await TunnelServer.attach(provider, { authorize: async () => ({ host: '127.0.0.1', port }), maxPerPeer: 4, maxTotal: 3, idleMs: 1_000, headerTimeoutMs: 1_000, log });
    openers = await Promise.all([0, 1].map(() => createHost({ keyPair: KeyPair.generate() })));
    await Promise.all([provider, ...openers].map((h) => h.start()));
    for (const o of openers) await o.dial(provider.getMultiaddrs());
  });

  afterAll(async () => {
    echo.close();
    await Promise.all([provider, ...openers].map((h) => h.stop()));
  });

  it('refuses past tunnel.max_streams across peers, and frees a slot when a stream that sends no header times out', async () => {
    const [a, b] = openers;
    const held: Stream[] = [];
    held.push(await a.dialProtocol(provider.peerId, TUNNEL_PROTOCOL), await a.dialProtocol(provider.peerId, TUNNEL_PROTOCOL));
    held.push(await b.dialProtocol(provider.peerId, TUNNEL_PROTOCOL));
    await waitFor('three tunnels held', () => tunnels.open === 3, { timeoutMs: 5_000 });
    // Peer b holds one of its 4: the refusal is the node's total.
    await expect(openTunnel(b, provider.peerId, { job_id: JOB, port: 1 })).rejects.toThrow(/tunnel\.max_streams\b/);
    // The header timeout (1 s here) lets the silent streams go.
    await waitFor('the silent streams released', () => tunnels.open === 0, { timeoutMs: 5_000 });
    expect(warnings.some((w) => w === 'tunnel refused')).toBe(true);
    for (const s of held) s.abort(new Error('done'));
  });

  it('carries bytes both ways, then closes a tunnel idle for tunnel.idle_timeout_ms', async () => {
    const [a] = openers;
    const { stream, rest } = await openTunnel(a, provider.peerId, { job_id: JOB, port: 1 });
    // The opener's end as a forward makes it: a local socket pair, one side piped into the stream.
    const listener = createServer();
    await new Promise<void>((r) => listener.listen(0, '127.0.0.1', r));
    const accepted = new Promise<Socket>((r) => listener.once('connection', r));
    const client = connect((listener.address() as AddressInfo).port, '127.0.0.1');
    pipe(await accepted, stream, rest, 60_000);
    const back = new Promise<string>((r) => client.once('data', (d) => r(d.toString())));
    client.write('ping');
    expect(await back).toBe('ping');
    await waitFor('one tunnel open', () => tunnels.open === 1, { timeoutMs: 2_000 });
    const closed = new Promise<void>((r) => client.once('close', () => r()));
    // Nothing sent for over the provider's 1 s idle timeout: it closes, and the client sees it.
    await waitFor('the idle tunnel closed', () => tunnels.open === 0, { timeoutMs: 5_000 });
    await closed;
    listener.close();
  });
});

describe('tunnel ends that go away mid-way', { timeout: 30_000 }, () => {
  const hosts: DmsLibp2p[] = [];
  afterAll(() => Promise.all(hosts.map((h) => h.stop())));
  const host = async () => {
    const h = await createHost({ keyPair: KeyPair.generate() });
    await h.start();
    hosts.push(h);
    return h;
  };

  it("closes the provider's connection to the job when the opener reset the stream while it was being made", async () => {
    // Found by reading the code: the answer's send threw on the reset stream, and the socket to
    // the job's port was never closed.
    const open = new Set<Socket>();
    let made = 0;
    const target = createServer((s) => {
      made++;
      open.add(s);
      s.on('close', () => open.delete(s));
      s.on('error', () => undefined);
    });
    await new Promise<void>((r) => target.listen(0, '127.0.0.1', r));
    const port = (target.address() as AddressInfo).port;
    let letThrough!: () => void;
    const authorized = new Promise<void>((r) => (letThrough = r));
    let asked!: () => void;
    const seen = new Promise<void>((r) => (asked = r));
    const provider = await host();
    await TunnelServer.attach(provider, {
      authorize: async () => {
        asked();
        await authorized;
        return { host: '127.0.0.1', port };
      },
      maxPerPeer: 4,
      maxTotal: 8,
      idleMs: 60_000,
      headerTimeoutMs: 5_000,
      log,
    });
    const opener = await host();
    await opener.dial(provider.getMultiaddrs());
    const stream = await opener.dialProtocol(provider.peerId, TUNNEL_PROTOCOL);
    stream.send(encodeFrame(JSON.stringify({ job_id: JOB, port: 1 })));
    await seen;
    stream.abort(new Error('the opener went away'));
    await new Promise((r) => setTimeout(r, 200));
    letThrough();
    await waitFor("the provider's connection to the job", () => made === 1, { timeoutMs: 5_000 });
    await waitFor('the connection to the job closed, nothing carrying it', () => open.size === 0, { timeoutMs: 3_000 });
    target.close();
  });

  it("ends the opener's stream when the provider answers with something that is not JSON", async () => {
    // Found by reading the code: the parse threw before the stream was aborted, so it stayed open
    // as long as the provider kept it.
    const provider = await host();
    let closed = false;
    await provider.handle(TUNNEL_PROTOCOL, async (stream) => {
      stream.addEventListener('close', () => (closed = true));
      stream.send(encodeFrame('not json at all'));
    });
    const opener = await host();
    await opener.dial(provider.getMultiaddrs());
    await expect(openTunnel(opener, provider.peerId, { job_id: JOB, port: 1 })).rejects.toThrow(/not JSON/);
    await waitFor("the provider's end of the stream closed", () => closed, { timeoutMs: 3_000 });
  });
});

describe('tunnel refusals in the log', { timeout: 30_000 }, () => {
  it('cost one warning a minute per peer, however many it asks for: 3,000 refusals wrote 1.2 MB of log in 6 s', async () => {
    const lines: { fields: Record<string, unknown>; msg: string }[] = [];
    const quietLog = { warn: (fields: Record<string, unknown>, msg: string) => void lines.push({ fields, msg }), debug: () => undefined };
    const provider = await createHost({ keyPair: KeyPair.generate() });
    await TunnelServer.attach(provider, { authorize: async (_peer, req) => Promise.reject(new Error(`no job ${req.job_id} here`)), maxPerPeer: 4, maxTotal: 16, idleMs: 1_000, log: quietLog });
    const opener = await createHost({ keyPair: KeyPair.generate() });
    await Promise.all([provider.start(), opener.start()]);
    try {
      await opener.dial(provider.getMultiaddrs());
      for (let i = 0; i < 40; i++) await expect(openTunnel(opener, provider.peerId, { job_id: JOB, port: 1 })).rejects.toThrow(/refused the tunnel/);
      expect(lines.filter((l) => l.msg === 'tunnel refused')).toHaveLength(1);
    } finally {
      await Promise.all([provider.stop(), opener.stop()]);
    }
  });
});
