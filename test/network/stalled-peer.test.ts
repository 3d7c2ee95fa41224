/**
 * A node whose process does not run for a while (a VM paused, the CPU taken by a burst, a long
 * collection) is not a dead peer, and a dead one is still given up. libp2p's connection monitor
 * pings every connection every 10 s; by default it aborted one whose ping waited 5 s, so a peer
 * lost its connection to a node stalled for a few seconds, silently on both sides (libp2p logs
 * it only under DEBUG). The node here is a real process stopped with SIGSTOP; the peer is a
 * transport of the node's stack in this process, whose log is kept.
 */
import { pino } from 'pino';
import { afterAll, beforeAll, expect, it } from 'vitest';
import type { Connection, StreamCloseEvent } from '@libp2p/interface';
import { peerIdFromString } from '@libp2p/peer-id';
import { KeyPair } from '../../runtime/crypto/keys.js';
import { BLOCKS_PROTOCOL } from '../../runtime/network/blocks.js';
import { Libp2pTransport } from '../../runtime/network/libp2p-transport.js';
import { TUNNEL_PROTOCOL } from '../../runtime/network/tunnel.js';
import { listenAddr, waitFor } from '../helpers/network.js';
import { removeHome, startNode, type NodeProcess } from '../helpers/node.js';
import { ForeignPeer } from '../helpers/peer.js';

let node: NodeProcess;
let peer: Libp2pTransport;
const peerLog: string[] = [];

beforeAll(async () => {
  node = await startNode();
  peer = await Libp2pTransport.create({
    keyPair: KeyPair.generate(),
    listen: ['/ip4/127.0.0.1/tcp/0'],
    log: pino({ level: 'warn' }, { write: (line: string) => void peerLog.push(line) }),
  });
  const hellos: string[] = [];
  peer.onEnvelope((env) => hellos.push(env.be));
  await peer.connect(listenAddr(node));
  // The node's hello says it finished its side of the handshake too: a stall inside the
  // handshake runs into libp2p's upgrade timeout, which is another matter.
  await waitFor("the node's hello", () => hellos.includes('/public/hello'));
}, 60_000);

afterAll(async () => {
  if (node) process.kill(node.pid, 'SIGCONT');
  await peer?.stop();
  await node?.stop();
  if (node) removeHome(node.home);
});

/** Stops the node's process for `ms`, and lets it run again. */
async function stall(ms: number): Promise<void> {
  process.kill(node.pid, 'SIGSTOP');
  try {
    await new Promise((r) => setTimeout(r, ms));
  } finally {
    process.kill(node.pid, 'SIGCONT');
  }
}

function watch(): { connection: Connection; closed: string[] } {
  const connection = peer.node.getConnections().find((c) => c.remotePeer.toString() === node.peerId);
  expect(connection, 'a connection to the node').toBeDefined();
  const closed: string[] = [];
  connection!.addEventListener('close', (e) => closed.push(`${(e as StreamCloseEvent).local ? 'here' : 'by the node'}: ${(e as StreamCloseEvent).error?.message ?? 'no error'}`));
  return { connection: connection!, closed };
}

it('keeps its connection to a node whose process stalls for 16 s', { timeout: 60_000 }, async () => {
  const { connection, closed } = watch();
  // The peer pings each connection every 10 s: a stall of 16 s holds one ping that has waited
  // at least 6 s for its answer when the node runs again.
  await stall(16_000);
  expect((await fetch(`${node.url}/health`)).status).toBe(200);
  // Long enough for the answer to the ping that waited to arrive, or for an abort to show.
  await new Promise((r) => setTimeout(r, 1_000));
  expect(closed, `the connection closed; the peer's log: ${peerLog.join('')}`).toEqual([]);
  expect(connection.status).toBe('open');
  expect(peer.peers()).toContain(node.peerId);
});

it("learns a node's protocols when its own process stalls for 7 s right after it connected", { timeout: 60_000 }, async () => {
  // Each side identifies the other as a connection opens (which protocols it speaks: the DHT,
  // the blocks and tunnel protocols, the actor channel), once, within libp2p's 5-s default; a
  // process that stalls across that wait fails it on waking (its own timer fires before it
  // reads the answer waiting in its socket) and never asks again, so it kept a connection
  // whose other side it did not know: not in its DHT table, never asked for blocks. The stall
  // is this process's own, a synchronous wait, as a burst of work would be.
  const late = await ForeignPeer.start();
  try {
    await late.connect(node);
    const until = Date.now() + 7_000;
    while (Date.now() < until) {
      // stalled
    }
    const protocols = () => late.transport.node.peerStore.get(peerIdFromString(node.peerId)).then((p) => p.protocols, () => [] as string[]);
    await waitFor("the node's protocols known to the peer", async () => (await protocols()).includes(BLOCKS_PROTOCOL), {
      timeoutMs: 10_000,
      explain: async () => `known: ${(await protocols()).join(', ') || 'none'}`,
    });
    expect(await protocols()).toContain(TUNNEL_PROTOCOL);
  } finally {
    await late.stop();
  }
});

it('gives up a node that answers nothing for 32 s, and says so in its log', { timeout: 60_000 }, async () => {
  const { closed } = watch();
  // A ping begun in the stall's first 10 s has waited its 20 s before the stall ends.
  await stall(32_000);
  await waitFor('the connection to close', () => closed.length > 0, { timeoutMs: 5_000 });
  expect(closed[0]).toMatch(/^here: .*timeout/i);
  const line = peerLog.map((l) => JSON.parse(l) as { msg: string; peer?: string; err?: string }).find((l) => l.msg === 'connection closed on an error');
  expect(line, peerLog.join('')).toMatchObject({ peer: node.peerId });
  expect(line!.err).toMatch(/timeout/i);
});
