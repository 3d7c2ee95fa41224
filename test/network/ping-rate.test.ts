/**
 * libp2p's ping handler echoes whatever a ping stream carries, for 10 s a stream. Found against a
 * running node: one peer pushing bytes through its 5 ping streams had the node echo 966 MB in 8 s,
 * spending 0.66 of a core, /health taking 38 ms at p50 and 153 ms at worst. A ping is 32 bytes:
 * now a peer may send 10 a second and a host 40 (five seconds' worth at once), and a stream past
 * that is reset before the handler reads it; an honest ping is still answered.
 */
import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { peerIdFromString } from '@libp2p/peer-id';
import { listenAddr, stopCluster, waitFor } from '../helpers/network.js';
import { type NodeProcess, startNode } from '../helpers/node.js';
import { type Identity, startIdentities } from '../helpers/identities.js';

const PING = '/ipfs/ping/1.0.0';
let node: NodeProcess;

beforeAll(async () => {
  node = await startNode();
}, 60_000);
afterAll(() => stopCluster([node].filter(Boolean)));

/** Pushes `chunk` down one ping stream for up to `ms`: the bytes echoed back, and whether the stream ended before the time was up. */
async function push(from: Identity, chunk: Uint8Array, ms: number): Promise<{ echoed: number; ended: boolean }> {
  const stream = await from.host.dialProtocol(peerIdFromString(node.peerId), PING);
  let echoed = 0;
  const reading = (async () => {
    for await (const b of stream) echoed += b.byteLength;
  })().catch(() => undefined);
  const until = Date.now() + ms;
  try {
    while (Date.now() < until && stream.status === 'open') if (!stream.send(chunk)) await stream.onDrain({ signal: AbortSignal.timeout(until - Date.now()) });
  } catch {
    // Reset by the node, or the time is up.
  }
  const ended = stream.status !== 'open';
  stream.abort(new Error('done'));
  await reading;
  return { echoed, ended };
}

/** `count` pings in one write: the bytes echoed back within `ms` (all of them when the node took them). */
async function pingBurst(from: Identity, count: number, ms: number): Promise<number> {
  const stream = await from.host.dialProtocol(peerIdFromString(node.peerId), PING);
  let echoed = 0;
  const timer = setTimeout(() => stream.abort(new Error('time is up')), ms);
  stream.send(randomBytes(32 * count));
  try {
    for await (const b of stream) if ((echoed += b.byteLength) >= 32 * count) break;
  } catch {
    // Reset by the node, or the time is up.
  }
  clearTimeout(timer);
  stream.abort(new Error('done'));
  return echoed;
}

/** One ping as libp2p makes it: 32 random bytes, the same 32 back. */
async function ping(from: Identity): Promise<boolean> {
  const stream = await from.host.dialProtocol(peerIdFromString(node.peerId), PING);
  const sent = randomBytes(32);
  stream.send(sent);
  let back = Buffer.alloc(0);
  for await (const b of stream) {
    back = Buffer.concat([back, b.subarray()]);
    if (back.length >= 32) break;
  }
  await stream.close().catch(() => undefined);
  return back.subarray(0, 32).equals(sent);
}

describe('ping streams', () => {
  it('carry a peer’s pings at its rate: one pushing bytes through them is reset at once, and nothing is echoed', { timeout: 60_000 }, async () => {
    const [flooder, honest] = [...(await startIdentities(1, { localAddress: '127.0.0.4' })), ...(await startIdentities(1, { localAddress: '127.0.0.5' }))];
    try {
      for (const id of [flooder!, honest!]) expect(await id.dial(listenAddr(node))).toBe(true);
      const chunk = new Uint8Array(64 * 1024);
      const runs = await Promise.all(Array.from({ length: 5 }, () => push(flooder!, chunk, 5_000)));
      // Unlimited, each stream echoed hundreds of MB in the 5 s (watched failing). A peer may
      // have 50 pings (1,600 bytes) at once: a 64 KiB write is past it, so nothing is echoed.
      for (const r of runs) expect(r).toEqual({ echoed: 0, ended: true });
      // Another host's pings are answered, one after another.
      for (let i = 0; i < 3; i++) expect(await ping(honest!)).toBe(true);
      expect((await fetch(`${node.url}/health`, { signal: AbortSignal.timeout(5_000) })).status).toBe(200);
    } finally {
      await Promise.all([flooder, honest].map((i) => i?.stop()));
    }
  });

  it('disconnect and refuse a peer that goes past its own rate on stream after stream', { timeout: 60_000 }, async () => {
    const [flooder] = await startIdentities(1, { localAddress: '127.0.0.6' });
    try {
      expect(await flooder!.dial(listenAddr(node))).toBe(true);
      // Each stream pushes 64 KiB, past the peer's 50 pings, and is reset; 50 such streams within
      // 10 s get the peer banned. Unstruck (watched failing), it went on for the whole 15 s.
      const chunk = new Uint8Array(64 * 1024);
      let streams = 0;
      const until = Date.now() + 15_000;
      await Promise.all(
        Array.from({ length: 4 }, async () => {
          while (flooder!.connected() && Date.now() < until) {
            try {
              const stream = await flooder!.host.dialProtocol(peerIdFromString(node.peerId), PING, { signal: AbortSignal.timeout(2_000) });
              streams++;
              while (stream.status === 'open' && Date.now() < until) if (!stream.send(chunk)) await stream.onDrain({ signal: AbortSignal.timeout(2_000) });
            } catch {
              // Reset by the node, or refused once it hung up.
            }
          }
        }),
      );
      expect(flooder!.connected(), `still connected after ${streams} streams`).toBe(false);
      expect(streams).toBeGreaterThanOrEqual(50);
      // The node logs the ban before it hangs up; its log reaches this process through a pipe, maybe later.
      await waitFor("the ban in the node's log", () => node.logs().includes('peer went past its own rate on stream after stream'), { timeoutMs: 10_000, intervalMs: 50 });
      // Within the ban its reconnect is dropped as soon as Noise names it.
      await flooder!.dial(listenAddr(node));
      await waitFor('the node to drop the banned peer', () => !flooder!.connected(), { timeoutMs: 10_000, intervalMs: 50 });
    } finally {
      await flooder?.stop();
    }
  });

  it('carry a host’s pings at its rate, though each of its identities pings within its own', { timeout: 60_000 }, async () => {
    // 8 identities on one address (4 a second: the most it may open) send 48 pings each in one
    // write: each within a peer's 50, together past the host's 200. Counted per peer alone,
    // every identity's 48 are echoed (watched failing).
    const crowd: Identity[] = [];
    try {
      for (let round = 0; round < 2; round++) {
        const four = await startIdentities(4, { localAddress: '127.0.0.9' });
        crowd.push(...four);
        for (const id of four) expect(await id.dial(listenAddr(node))).toBe(true);
        await new Promise((r) => setTimeout(r, 1_100));
      }
      const PINGS = 48;
      const echoed = await Promise.all(crowd.map((id) => pingBurst(id, PINGS, 5_000)));
      const whole = echoed.filter((n) => n >= 32 * PINGS).length;
      expect(whole).toBeGreaterThanOrEqual(1);
      expect(whole).toBeLessThanOrEqual(4);
      // Past only their host's rate, none of them is struck for it.
      for (const id of crowd) expect(id.connected()).toBe(true);
    } finally {
      await Promise.all(crowd.map((i) => i.stop()));
    }
  });
});
