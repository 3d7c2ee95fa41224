/**
 * Frames that are never completed, from several peers at once, against a node process: each
 * actor stream may hold up to one envelope's bytes (1 MiB) of a frame not yet whole, 32 streams
 * a connection, and nothing bounded what all of them held together while they kept within the
 * stall time (ten throwaway identities: +360 MB). The node keeps them within its budget (64 MiB
 * by default): past it, streams of the peer holding most are reset at once.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Stream } from '@libp2p/interface';
import { peerIdFromString } from '@libp2p/peer-id';
import { ACTOR_PROTOCOL } from '../../runtime/network/libp2p-transport.js';
import { MIN_PARTIAL_BUDGET } from '../../runtime/network/partial-frames.js';
import { stopCluster, waitFor } from '../helpers/network.js';
import { type NodeProcess, startNode } from '../helpers/node.js';
import { ForeignPeer } from '../helpers/peer.js';

const MIB = 1024 * 1024;
const PEERS = 6;
const STREAMS_PER_PEER = 30;

let node: NodeProcess;
const peers: ForeignPeer[] = [];

beforeAll(async () => {
  node = await startNode();
  for (let i = 0; i < PEERS; i++) peers.push(await ForeignPeer.connectedTo(node));
}, 90_000);
afterAll(async () => {
  await Promise.all(peers.map((p) => p.stop()));
  await stopCluster([node].filter(Boolean));
});

/** All but the last byte of a 1 MiB frame. */
async function holdPartial(stream: Stream, body: Uint8Array): Promise<void> {
  try {
    if (!stream.send(Uint8Array.of(0x80, 0x80, 0x40))) await stream.onDrain({ signal: AbortSignal.timeout(5_000) });
    if (!stream.send(body)) await stream.onDrain({ signal: AbortSignal.timeout(5_000) });
  } catch {
    // Reset by the node while sending: what the test counts.
  }
}

describe('partial frames from many peers at once', () => {
  it('are held within the node budget: past it streams are reset at once, and the node still serves', { timeout: 60_000 }, async () => {
    const body = new Uint8Array(MIB - 1).fill(0x7b);
    const streams: Stream[] = [];
    for (const peer of peers) {
      for (let i = 0; i < STREAMS_PER_PEER; i++) streams.push(await peer.transport.node.dialProtocol(peerIdFromString(node.peerId), ACTOR_PROTOCOL));
    }
    await Promise.all(streams.map((s) => holdPartial(s, body)));
    const allowed = Math.floor(MIN_PARTIAL_BUDGET / MIB);
    // All past the budget are reset for it (so said in the log), not left for their stall time.
    const reset = await waitFor(
      `the node to reset the streams past its ${allowed} MiB budget`,
      () => {
        const n = streams.filter((s) => s.status !== 'open').length;
        return n >= streams.length - allowed && n;
      },
      { timeoutMs: 20_000, intervalMs: 100 },
    );
    // Said once for the burst (a line per 10 s at most, with how many went unlogged), not per stream.
    const lines = node.logs().split('\n').filter((l) => l.includes("partial frames over every peer past the node's budget"));
    expect(lines.length).toBeGreaterThanOrEqual(1);
    expect(lines.length).toBeLessThanOrEqual(2);
    // The streams left open each hold a partial frame: within the budget, not the 180 MiB sent,
    // and not nothing (the node is not resetting every stream).
    expect(streams.length - reset).toBeGreaterThan(0);
    expect((streams.length - reset) * MIB).toBeLessThanOrEqual(MIN_PARTIAL_BUDGET);
    const fresh = await ForeignPeer.connectedTo(node);
    try {
      await fresh.send(fresh.envelope(node, { be: '/public/hello', cont: '/private/hello-reply' }));
      await fresh.waitReply('/private/hello-reply', 10_000);
    } finally {
      await fresh.stop();
    }
  });
});
