/**
 * A node's inbound libp2p connections against one address that takes them all (found by a
 * hostile peer against a running node). libp2p keeps 10 handshakes pending at once over every
 * address, each for up to 10 s, and takes 5 new connections a second from one address: TCP
 * sockets that never begin Noise, opened at that rate from one address, kept every other peer
 * out for as long as they were opened. And it refuses every inbound connection past its
 * maximum, before it knows who dials: identities cost nothing, so one address holding the
 * maximum of connected identities kept every other peer out for as long as it held them.
 *
 * The attacker dials from 127.0.0.2 (and more), the genuine peer from 127.0.0.1: all loopback,
 * seen by the node as separate hosts.
 */
import { connect, type Socket } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { getNetConfig } from '@libp2p/utils';
import { multiaddr } from '@multiformats/multiaddr';
import { stopCluster, listenAddr, waitFor } from '../helpers/network.js';
import { type NodeProcess, startNode } from '../helpers/node.js';
import { ForeignPeer } from '../helpers/peer.js';
import { startIdentities, type Identity } from '../helpers/identities.js';

const ATTACKER_IP = '127.0.0.2';
/** Twelve attacker addresses: 127.0.0.2 to 127.0.0.13. */
const ATTACKER_IPS = Array.from({ length: 12 }, (_, i) => `127.0.0.${i + 2}`);
/** network.MaxConnections for the node under test: small, so an attacker can fill it here. */
const MAX_CONNECTIONS = 24;

let node: NodeProcess;
const sockets: Socket[] = [];
const identities: Identity[] = [];

beforeAll(async () => {
  node = await startNode({ config: { network: { MaxConnections: MAX_CONNECTIONS } } });
}, 60_000);
afterAll(async () => {
  for (const s of sockets) s.destroy();
  await Promise.all(identities.map((i) => i.stop()));
  await stopCluster([node].filter(Boolean));
});

function nodeTcp(): { host: string; port: number } {
  const { host, port } = getNetConfig(multiaddr(listenAddr(node)));
  return { host, port: port! };
}

/** A genuine peer from 127.0.0.1 connects and has a hello answered, within `ms`. */
async function genuineHello(ms: number): Promise<void> {
  const peer = await ForeignPeer.start();
  try {
    await waitFor('a genuine peer from another address to connect', async () => {
      try {
        await peer.connect(node);
        return true;
      } catch {
        return false;
      }
    }, { timeoutMs: ms, intervalMs: 500 });
    await peer.send(peer.envelope(node, { be: '/public/hello', cont: '/private/hello-reply' }));
    await peer.waitReply('/private/hello-reply', 10_000);
  } finally {
    await peer.stop();
  }
}

describe('inbound connections from one address that takes them all', () => {
  it('sockets that never begin a handshake, opened from many addresses as fast as the node takes them, leave room for a peer from another', { timeout: 60_000 }, async () => {
    const { host, port } = nodeTcp();
    let opening = true;
    // From each address four a second, under libp2p's five a second per address: each is taken,
    // and held by the node until its handshake times out. Twelve addresses hold more than the
    // node keeps pending over all.
    const opener = (async () => {
      while (opening) {
        for (const localAddress of ATTACKER_IPS) {
          const s = connect({ host, port, localAddress });
          s.on('error', () => {});
          sockets.push(s);
        }
        await new Promise((r) => setTimeout(r, 250));
      }
    })();
    try {
      await new Promise((r) => setTimeout(r, 4_000));
      await genuineHello(15_000);
    } finally {
      opening = false;
      await opener;
      for (const s of sockets.splice(0)) s.destroy();
    }
  });

  it('identities from one address holding every connection leave room for a peer from another address', { timeout: 90_000 }, async () => {
    // At most 5 a second from one address: MAX_CONNECTIONS identities take about 5 s to connect.
    identities.push(...(await startIdentities(MAX_CONNECTIONS + 4, { localAddress: ATTACKER_IP })));
    let connected = 0;
    for (const id of identities) {
      for (let attempt = 0; attempt < 20; attempt++) {
        if (await id.dial(listenAddr(node))) {
          connected++;
          break;
        }
        await new Promise((r) => setTimeout(r, 300));
      }
    }
    // The attacker filled what the node would hold.
    expect(connected).toBeGreaterThanOrEqual(MAX_CONNECTIONS - 2);
    await genuineHello(15_000);
    // The node holds no more than it was told to.
    const held = identities.filter((i) => i.connected()).length;
    expect(held).toBeLessThanOrEqual(MAX_CONNECTIONS);
  });
});
