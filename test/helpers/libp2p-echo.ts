import type { Stream } from '@libp2p/interface';
import type { Multiaddr } from '@multiformats/multiaddr';
import { frameDecoder } from '../../runtime/network/frames.js';
import type { DmsLibp2p } from '../../runtime/network/host.js';

/*
 * Request/reply over the node's libp2p stack with nothing of DMS on top: a protocol whose
 * server sends back every byte as it arrives, and a client that sends one length-prefixed
 * frame (runtime/network/frames.ts) at a time and waits for it to come back whole. The
 * network floor of bench:net, and what test/network/wire-writes.test.ts counts writes on.
 */

export const ECHO_PROTOCOL = '/dms-bench/echo/1.0.0';

/** Makes `server` echo every stream of ECHO_PROTOCOL: frames go back exactly as they arrived. */
export async function serveEcho(server: DmsLibp2p): Promise<void> {
  await server.handle(ECHO_PROTOCOL, (stream) => {
    stream.addEventListener('message', (evt) => stream.send(evt.data));
  });
}

export interface EchoStream {
  stream: Stream;
  /** Sends `frame` (an encoded frame of `payloadBytes`) and resolves once it is back whole; rejects on any other size. */
  roundTrip(frame: Uint8Array, payloadBytes: number): Promise<void>;
}

/** One stream from `client` to the echo of `server` (a host, or the addresses of one in another process), one frame in flight at a time. */
export async function openEcho(client: DmsLibp2p, server: DmsLibp2p | Multiaddr[]): Promise<EchoStream> {
  const stream = await client.dialProtocol(Array.isArray(server) ? server : server.getMultiaddrs(), ECHO_PROTOCOL);
  // Far above any frame the bench or the tests send.
  const decoder = frameDecoder(64 * 1024 * 1024);
  let waiting: { bytes: number; done: () => void; fail: (e: Error) => void } | undefined;
  stream.addEventListener('message', (evt) => {
    for (const frame of decoder.decode(evt.data)) {
      const w = waiting;
      waiting = undefined;
      if (!w) continue;
      if (frame.byteLength === w.bytes) w.done();
      else w.fail(new Error(`echo returned ${frame.byteLength} bytes, sent ${w.bytes}`));
    }
  });
  return {
    stream,
    roundTrip: (frame, payloadBytes) =>
      new Promise<void>((done, fail) => {
        waiting = { bytes: payloadBytes, done, fail };
        stream.send(frame);
      }),
  };
}
