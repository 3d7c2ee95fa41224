/**
 * A node delivers what the network sends it to its own actors, and relays nothing. A peer
 * wrote, on its actor stream to a node, signed envelopes addressed to a second peer, and the
 * node sent them on (found by a hostile peer against a running node): it dialled on a
 * stranger's word, for an unknown peer id after a DHT look-up of up to 5 s, and spent its
 * bandwidth on the stranger's traffic. Now it refuses them, telling the sender why.
 */
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { peerIdFromString } from '@libp2p/peer-id';
import type { Stream } from '@libp2p/interface';
import { encodeFrame } from '../../runtime/network/frames.js';
import { ACTOR_PROTOCOL } from '../../runtime/network/libp2p-transport.js';
import { decodePayload, encodeEnvelope } from '../../runtime/wire/envelope.js';
import { type LocalNode, startLocalNode } from '../helpers/local-node.js';
import { signEnvelopeSync } from '../helpers/envelopes.js';
import { ForeignPeer } from '../helpers/peer.js';

let node: LocalNode;
let sender: ForeignPeer;
let target: ForeignPeer;
let stream: Stream;

beforeAll(async () => {
  node = await startLocalNode();
  [sender, target] = [await ForeignPeer.connectedTo(node), await ForeignPeer.connectedTo(node)];
  // Written as it is on the stream to the node: the sender's own transport would send an
  // envelope for the target straight to the target.
  stream = await sender.transport.node.dialProtocol(peerIdFromString(node.peerId), ACTOR_PROTOCOL);
}, 60_000);
afterAll(async () => {
  await Promise.all([sender?.stop(), target?.stop()]);
  await node?.stop();
});

describe('an envelope from the network for another host', () => {
  it('is refused with a reply naming why, and never reaches that host', { timeout: 30_000 }, async () => {
    const cont = `/private/r/${randomUUID()}`;
    const toNode = sender.envelope(node, { be: '/public/hello', cont });
    const toTarget = signEnvelopeSync({ ...toNode, to: { id: '', did: '', addr: { host: target.host, inbox: 'root' } } }, sender.key);
    stream.send(encodeFrame(encodeEnvelope(toTarget)));
    const reply = await sender.waitReply(cont, 10_000);
    expect(reply.from.addr.host).toBe(node.peerId);
    expect(decodePayload(reply.msg)).toMatchObject({ kind: 'forbidden', error: expect.stringMatching(new RegExp(`to\\.addr\\.host ${target.host} is another node`)) });
    // The node's hello to it aside, the target got nothing from the sender through the node.
    await new Promise((r) => setTimeout(r, 500));
    expect(target.arrived.filter((e) => e.from.addr.host === sender.host)).toEqual([]);
  });

  it('control: the same envelope addressed to the node itself is answered', { timeout: 30_000 }, async () => {
    const cont = `/private/r/${randomUUID()}`;
    stream.send(encodeFrame(encodeEnvelope(sender.envelope(node, { be: '/public/hello', cont }))));
    const reply = await sender.waitReply(cont, 10_000);
    expect(decodePayload(reply.msg)).toMatchObject({ did: expect.stringMatching(/^did:key:/) });
  });
});
