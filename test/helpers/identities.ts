/**
 * Throwaway libp2p identities, as an attacker makes them: each a bare host (TCP, Noise, yamux,
 * identify) with a key of its own, dialling from the address it is given, doing nothing once
 * connected.
 */
import '../../runtime/polyfills.js';
import { noise } from '@chainsafe/libp2p-noise';
import { identify } from '@libp2p/identify';
import { tcp, type TCPSocketOptions } from '@libp2p/tcp';
import { yamux } from '@libp2p/yamux';
import { createLibp2p, type Libp2p } from 'libp2p';
import { multiaddr } from '@multiformats/multiaddr';

export interface Identity {
  /** Its libp2p host, for a test that speaks a protocol itself. */
  host: Libp2p;
  /** Dials `addr`; whether a connection came of it. */
  dial(addr: string): Promise<boolean>;
  /** Whether it holds a connection to anyone now. */
  connected(): boolean;
  stop(): Promise<void>;
}

export async function startIdentities(count: number, opts: { localAddress: string }): Promise<Identity[]> {
  return Promise.all(
    Array.from({ length: count }, async (): Promise<Identity> => {
      const host: Libp2p = await createLibp2p({
        // @libp2p/tcp hands its dial options to net.connect as they are; its type names only a few.
        transports: [tcp({ dialOpts: { localAddress: opts.localAddress } as TCPSocketOptions })],
        connectionEncrypters: [noise()],
        streamMuxers: [yamux()],
        services: { identify: identify() },
      });
      return {
        host,
        dial: async (addr) => {
          try {
            await host.dial(multiaddr(addr), { signal: AbortSignal.timeout(5_000) });
            return true;
          } catch {
            return false;
          }
        },
        connected: () => host.getConnections().some((c) => c.status === 'open'),
        stop: async () => host.stop(),
      };
    }),
  );
}
