import { Socket } from 'node:net';
import type { Stream } from '@libp2p/interface';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { KeyPair } from '../../runtime/crypto/keys.js';
import { encodeFrame } from '../../runtime/network/frames.js';
import { createHost, type DmsLibp2p } from '../../runtime/network/host.js';
import { openEcho, serveEcho } from '../helpers/libp2p-echo.js';

/*
 * What one envelope costs the socket, over the node's real libp2p stack (TCP, Noise, Yamux) on
 * 127.0.0.1. Unpatched, each frame left as two write(2)s (Noise's 2-byte length, then the
 * ciphertext) and each data frame received was answered by a Yamux window update (two more):
 * eight writes per request/reply. patches/ (applied by `npm ci`) make it one per message. If
 * these fail after a dependency update, the patches no longer apply as they did: see README
 * "Network".
 */

/** Counts socket writes that reach the kernel: Writable's _write is one write(2), _writev one writev(2). */
function countWrites(): { count(): number; restore(): void } {
  const proto = Socket.prototype as unknown as Record<'_write' | '_writev', (...args: unknown[]) => unknown>;
  const write = proto._write;
  const writev = proto._writev;
  let n = 0;
  proto._write = function (this: Socket, ...args: unknown[]) {
    n++;
    return write.apply(this, args);
  };
  proto._writev = function (this: Socket, ...args: unknown[]) {
    n++;
    return writev.apply(this, args);
  };
  return {
    count: () => n,
    restore: () => {
      proto._write = write;
      proto._writev = writev;
    },
  };
}

/** Yamux's initial receive window. */
const WINDOW = 256 * 1024;

/** `p`, or a failure saying `what` once `ms` have passed. */
async function within<T>(ms: number, p: Promise<T>, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  try {
    return await Promise.race([p, new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error(what)), ms)))]);
  } finally {
    clearTimeout(timer);
  }
}

describe('libp2p stream writes (patches/)', () => {
  let server: DmsLibp2p;
  let client: DmsLibp2p;

  beforeAll(async () => {
    [server, client] = await Promise.all([createHost({ keyPair: KeyPair.generate() }), createHost({ keyPair: KeyPair.generate() })]);
    await serveEcho(server);
    await Promise.all([server.start(), client.start()]);
  });

  afterAll(async () => {
    await Promise.all([client?.stop(), server?.stop()]);
  });

  /** An echo stream: `roundTrip(bytes)` sends one frame of that size and resolves once all of it is back. */
  async function echoStream(): Promise<{ stream: Stream; roundTrip(bytes: number): Promise<void> }> {
    const echo = await openEcho(client, server);
    return { stream: echo.stream, roundTrip: (bytes) => echo.roundTrip(encodeFrame('x'.repeat(bytes)), bytes) };
  }

  it('sends each envelope of a request/reply exchange in one socket write', async () => {
    const { stream, roundTrip } = await echoStream();
    for (let i = 0; i < 50; i++) await roundTrip(600);
    const writes = countWrites();
    const rounds = 300;
    try {
      for (let i = 0; i < rounds; i++) await roundTrip(600);
    } finally {
      writes.restore();
    }
    // Two messages per round (request, echo). Slack for what else the hosts send meanwhile
    // (identify, ping, gossipsub heartbeats); unpatched this is 8 per round.
    expect(writes.count() / rounds).toBeLessThan(2.5);
    expect(writes.count() / rounds).toBeGreaterThanOrEqual(2);
    await stream.close();
  });

  it('still credits the sender: far more than a receive window (256 KiB) crosses one stream', async () => {
    const { stream, roundTrip } = await echoStream();
    // 4 MiB each way in one frame, then many mid-sized frames: each needs window updates on
    // both sides, and would stall if the half-window rule never sent one. A stall fails here,
    // naming the frame, before the test's own timeout.
    const sizes = [4 * 1024 * 1024, ...Array.from({ length: 200 }, () => 60_000)];
    let echoed = 0;
    for (const [i, bytes] of sizes.entries()) {
      await within(20_000, roundTrip(bytes), `frame ${i} (${bytes} bytes) never came back whole: the sender is not credited`);
      echoed += bytes;
    }
    expect(echoed).toBe(4 * 1024 * 1024 + 200 * 60_000);
    // Far more than one receive window, each way, on one stream that is still open.
    expect(echoed).toBeGreaterThan(16 * WINDOW);
    expect(stream.status).toBe('open');
    await stream.close();
  }, 30_000);
});
