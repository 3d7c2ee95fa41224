/**
 * A log flood from one peer (issue 26): a hostile peer opens the actor protocol stream and
 * writes frames that are not envelopes in a loop. Each used to cost the node a warning line
 * (51 MiB of log in 10 s), with no penalty. Now the node warns about a peer at most once a
 * minute, and a peer past 1000 undecodable frames within 10 s is disconnected and refused for
 * 10 minutes (runtime/network/bans.ts); a genuine peer still gets its answers.
 */
import type { StreamCloseEvent } from '@libp2p/interface';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { encodeFrame } from '../../runtime/network/frames.js';
import { ACTOR_PROTOCOL } from '../../runtime/network/libp2p-transport.js';
import { peerIdFromString } from '@libp2p/peer-id';
import { waitFor } from '../helpers/network.js';
import { type NodeProcess, removeHome, startNode } from '../helpers/node.js';
import { ForeignPeer } from '../helpers/peer.js';

/** Well past the bound (1000 undecodable frames within 10 s), and bounded. */
const FRAMES = 5_000;

let node: NodeProcess;
const peers: ForeignPeer[] = [];

beforeAll(async () => {
  node = await startNode({ timeoutMs: 45_000 });
}, 60_000);
afterAll(async () => {
  await Promise.all(peers.map((p) => p.stop()));
  await node?.stop();
  if (node) removeHome(node.home);
});

/** Writes `FRAMES` undecodable frames on one actor stream, until done or the node cuts it off; returns how many went out. */
async function flood(hostile: ForeignPeer): Promise<number> {
  const stream = await hostile.transport.node.dialProtocol(peerIdFromString(node.peerId), ACTOR_PROTOCOL);
  let sent = 0;
  try {
    for (; sent < FRAMES; sent++) {
      if (stream.status !== 'open' || stream.writeStatus !== 'writable') break;
      if (!stream.send(encodeFrame(`{"garbage": ${sent}`))) await stream.onDrain({ signal: AbortSignal.timeout(5_000) });
    }
  } catch {
    // The node reset the stream or closed the connection: what the test is waiting for.
  }
  return sent;
}

const linesAbout = (peer: string) => node.logs().split('\n').filter((l) => l.includes(peer));

describe('a peer writing undecodable frames on the actor stream', () => {
  it('costs the node a few log lines, is disconnected, is refused on reconnecting, and a genuine peer still works', { timeout: 90_000 }, async () => {
    const hostile = await ForeignPeer.connectedTo(node);
    peers.push(hostile);
    const logBefore = node.logs().length;
    const closes: string[] = [];
    for (const c of hostile.transport.node.getConnections()) c.addEventListener('close', (e) => closes.push((e as StreamCloseEvent).error?.message ?? 'no error'));
    const sent = await flood(hostile);
    await waitFor('the node to disconnect the hostile peer', () => !hostile.transport.peers().includes(node.peerId), { timeoutMs: 20_000, intervalMs: 100 });

    // The node logs the ban before it hangs up, but its log reaches this process through a pipe
    // that may be read after the disconnect was seen here.
    const banned = (l: string) => l.includes('undecodable frames: disconnected and refused for 600 s');
    await waitFor("the ban in the node's log", () => linesAbout(hostile.host).some(banned), {
      timeoutMs: 10_000,
      intervalMs: 50,
      explain: () => `${sent} frames went out; the peer's connection closed: ${closes.join('; ')}; the node's log about it:\n${linesAbout(hostile.host).join('\n')}`,
    });
    // One warning, the ban, and the hang-up's connection closing on an error if it did.
    const lines = linesAbout(hostile.host);
    const rest = lines.filter((l) => !banned(l) && !l.includes('connection closed on an error'));
    expect(rest.length, lines.join('\n')).toBeGreaterThanOrEqual(1);
    expect(rest.length, lines.join('\n')).toBeLessThanOrEqual(2);
    expect(rest[0]).toContain('undecodable envelope dropped');
    expect(lines.filter(banned)).toHaveLength(1);
    expect(node.logs().length - logBefore).toBeLessThan(8 * 1024);

    // Within the ban a reconnect is refused: the node closes the connection as soon as Noise
    // names the peer (the dial itself may have looked complete by then), and nothing the peer
    // sends is answered, even a valid hello.
    await hostile.connect(node).catch(() => undefined);
    await waitFor('the node to drop the reconnect', () => !hostile.transport.peers().includes(node.peerId), { timeoutMs: 10_000, intervalMs: 50 });
    const hello = hostile.envelope(node, { be: '/public/hello', cont: '/private/banned-hello' });
    const answered = await hostile.send(hello).then(() => hostile.waitReply('/private/banned-hello', 5_000)).then(() => true, () => false);
    expect(answered).toBe(false);

    // A genuine peer is answered.
    const genuine = await ForeignPeer.connectedTo(node);
    peers.push(genuine);
    await genuine.send(genuine.envelope(node, { be: '/public/hello', cont: '/private/hello-back' }));
    const reply = await genuine.waitReply('/private/hello-back', 20_000);
    expect(reply.from.did).toBe(node.did);
    expect((await fetch(`${node.url}/health`)).status).toBe(200);
  });
});
