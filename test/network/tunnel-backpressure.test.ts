/**
 * A tunnel whose target reads slower than the network delivers (a job busy for a moment, a slow
 * consumer of a download): the provider stops reading its stream, the stream's muxer window
 * stops the opener, and nothing is lost or reset when the target reads again. Two bare hosts of
 * the node's stack; the target is a local TCP server that stops reading for a while mid-way.
 */
import { connect, createServer, type AddressInfo, type Server, type Socket } from 'node:net';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { KeyPair } from '../../runtime/crypto/keys.js';
import { createHost, type DmsLibp2p } from '../../runtime/network/host.js';
import { openTunnel, pipe, TunnelServer } from '../../runtime/network/tunnel.js';

const JOB = '00000000-0000-4000-8000-000000000001';
const MIB = 1024 * 1024;
/** Far past the muxer's largest window (16 MiB) and the stream's read buffer (4 MiB). */
const TOTAL = 48 * MIB;
const STALL_AFTER = 8 * MIB;
const STALL_MS = 1_500;
const warnings: string[] = [];
const log = { warn: (f: Record<string, unknown>, msg: string) => void warnings.push(`${msg} ${JSON.stringify(f)}`), debug: () => undefined };

let provider: DmsLibp2p;
let opener: DmsLibp2p;
let target: Server;
let forward: Server;
/** The most bytes the opener's side of the tunnel held unsent in its stream (sampled). */
let openerQueued = 0;

const listen = (s: Server) => new Promise<number>((r) => s.listen(0, '127.0.0.1', () => r((s.address() as AddressInfo).port)));

beforeAll(async () => {
  // Reads at once until STALL_AFTER (so the muxer's window has grown), stops reading for
  // STALL_MS, then reads the rest, and answers one byte once every byte arrived.
  target = createServer((s) => {
    let n = 0;
    let stalled = false;
    s.on('data', (d) => {
      n += d.length;
      if (n >= TOTAL) s.write(Buffer.of(1));
      else if (n >= STALL_AFTER && !stalled) {
        stalled = true;
        s.pause();
        setTimeout(() => s.resume(), STALL_MS);
      }
    });
    s.on('error', () => undefined);
  });
  const targetPort = await listen(target);
  provider = await createHost({ keyPair: KeyPair.generate() });
  await TunnelServer.attach(provider, { authorize: async () => ({ host: '127.0.0.1', port: targetPort }), maxPerPeer: 4, maxTotal: 8, idleMs: 20_000, log });
  opener = await createHost({ keyPair: KeyPair.generate() });
  await Promise.all([provider.start(), opener.start()]);
  await opener.dial(provider.getMultiaddrs());
  // The opener's forward listener, as daemon/tunnels.ts makes one.
  forward = createServer((socket) => {
    socket.pause();
    openTunnel(opener, provider.peerId, { job_id: JOB, port: 1 }).then(
      ({ stream, rest }) => {
        pipe(socket, stream, rest, 20_000);
        socket.resume();
        const sample = setInterval(() => (openerQueued = Math.max(openerQueued, stream.writeBufferLength)), 2);
        stream.addEventListener('close', () => clearInterval(sample));
      },
      () => socket.destroy(),
    );
  });
}, 30_000);

afterAll(async () => {
  forward?.close();
  target?.close();
  await Promise.all([provider?.stop(), opener?.stop()]);
});

it('carries every byte to a target that stops reading for a while, without resetting the tunnel', { timeout: 30_000 }, async () => {
  const socket: Socket = await new Promise(async (resolve, reject) => {
    const s = connect({ host: '127.0.0.1', port: await listen(forward) }, () => resolve(s));
    s.once('error', reject);
  });
  const outcome = new Promise<string>((resolve) => {
    socket.once('data', () => resolve('acknowledged'));
    socket.once('close', () => resolve('closed before the target had every byte'));
    setTimeout(() => resolve('no answer within 20 s'), 20_000).unref();
  });
  const chunk = Buffer.alloc(64 * 1024, 7);
  for (let sent = 0; sent < TOTAL && !socket.destroyed; sent += chunk.length) {
    if (!socket.write(chunk)) {
      await new Promise<void>((r) => {
        const done = () => (socket.off('drain', done), socket.off('close', done), r());
        socket.once('drain', done).once('close', done);
      });
    }
  }
  expect(await outcome, warnings.join('\n')).toBe('acknowledged');
  socket.destroy();
  // The stall reached the client as backpressure: the opener read from it only what its stream
  // could send, instead of taking in the rest of the upload while the target did not read.
  expect(openerQueued).toBeLessThan(2 * MIB);
});
