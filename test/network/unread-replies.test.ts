/**
 * A peer that sends requests and never reads the replies. Found against a running node: each
 * reply waited for room on the node's stream to that peer, and the handler that made it waited
 * with it, holding one of its actor's 64 slots. 5,000 hellos from such a peer held every slot of
 * the root actor for good and filled its mailbox (4,096): every other peer's invoke was refused
 * ("mailbox of actor root is full"), and the first one waited unanswered. The same held any
 * actor a peer may ask, the deployment actor's bids and leases among them.
 */
import type { Stream } from '@libp2p/interface';
import { describe, expect, it } from 'vitest';
import { ACTOR_PROTOCOL } from '../../runtime/network/libp2p-transport.js';
import { decodePayload } from '../../runtime/wire/envelope.js';
import { listenAddr, waitFor } from '../helpers/network.js';
import { ForeignPeer } from '../helpers/peer.js';
import { nodeWithPeers } from '../helpers/started.js';

/** Replies to /public/hello are a few hundred bytes: this many fill the stream's window many times over. */
const REQUESTS = 5_000;

const scene = nodeWithPeers();

/** Waits up to `ms` for the reply at `be`: how long it took and what it said, or 'none'. */
async function replyWithin(peer: ForeignPeer, be: string, ms: number): Promise<string> {
  const started = performance.now();
  while (!peer.replies(be).length) {
    if (performance.now() - started > ms) return 'none';
    await new Promise((r) => setTimeout(r, 5));
  }
  const said = decodePayload(peer.replies(be)[0]!.msg) as { did?: string; error?: string };
  return said.did ? `answered in ${Math.round(performance.now() - started)} ms` : `refused: ${said.error ?? JSON.stringify(said)}`;
}

describe('a peer that never reads its replies', () => {
  it('holds none of the actor it asks: another peer is still answered', { timeout: 90_000 }, async () => {
    // Every stream the node opens to it is paused as it arrives: nothing is read, no window credited.
    const { node } = scene;
    const hostile = scene.keep(await ForeignPeer.start());
    const unread: Stream[] = [];
    await hostile.transport.node.unhandle(ACTOR_PROTOCOL);
    await hostile.transport.node.handle(ACTOR_PROTOCOL, (stream: Stream) => {
      stream.pause();
      unread.push(stream);
    });
    await hostile.transport.connect(listenAddr(node));
    for (let i = 0; i < REQUESTS; i++) await hostile.send(hostile.envelope(node, { be: '/public/hello', cont: '/private/unread', ttlMs: 60_000 }));

    const honest = scene.keep(await ForeignPeer.connectedTo(node));
    const took: string[] = [];
    for (let i = 0; i < 5; i++) {
      await honest.send(honest.envelope(node, { be: '/public/hello', cont: `/private/honest-${i}`, ttlMs: 20_000 }));
      took.push(await replyWithin(honest, `/private/honest-${i}`, 5_000));
    }
    const res = await fetch(`${node.url}/health`, { signal: AbortSignal.timeout(5_000) });
    expect(res.status).toBe(200);
    expect(unread.length, 'the node opened a stream to the peer that does not read').toBeGreaterThan(0);
    expect(took.every((t) => t.startsWith('answered')), `the honest peer's invokes, each waited for 5 s: ${took.join('; ')}`).toBe(true);
    // And what waits for the peer is not held for ever: its stream is given up once it took
    // nothing for the stall time (10 s), and the replies waiting for it with it.
    await waitFor('the node to give up the stream nobody reads', () => unread[0]!.status !== 'open', { timeoutMs: 20_000 });
  });
});
