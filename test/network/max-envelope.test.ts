import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { msToNs, nextNonce, nowNs } from '../../runtime/time.js';
import { post } from '../helpers/envelopes.js';
import { stopCluster } from '../helpers/network.js';
import { type NodeProcess, startNode } from '../helpers/node.js';
import { ForeignPeer } from '../helpers/peer.js';

/**
 * `network.MaxEnvelopeBytes` is a node setting (README "Configuration"): set to 4 KiB, the
 * node refuses an 8 KiB envelope from the network and will not send one, while a node on the
 * default (1 MiB) answers the same envelope.
 */

const LIMIT = 4096;
let small: NodeProcess;
let usual: NodeProcess;
let atSmall: ForeignPeer;
let atUsual: ForeignPeer;

beforeAll(async () => {
  [small, usual] = await Promise.all([startNode({ config: { network: { MaxEnvelopeBytes: LIMIT } } }), startNode({})]);
  [atSmall, atUsual] = await Promise.all([ForeignPeer.connectedTo(small), ForeignPeer.connectedTo(usual)]);
}, 60_000);
afterAll(async () => {
  await Promise.all([atSmall?.stop(), atUsual?.stop()]);
  await stopCluster([small, usual].filter(Boolean));
});

/** A hello from `peer` to `node`'s root with a payload padded to about `bytes`; the reply's cont. */
async function hello(peer: ForeignPeer, node: NodeProcess, bytes: number): Promise<string> {
  const cont = `/private/r/${randomUUID()}`;
  await peer.send(peer.envelope(node, { be: '/public/hello', cont, payload: { pad: 'x'.repeat(bytes) } }));
  return cont;
}

describe('network.MaxEnvelopeBytes', () => {
  it('a node set to 4 KiB drops an 8 KiB envelope from a peer unanswered, and answers a small one after it', { timeout: 30_000 }, async () => {
    const big = await hello(atSmall, small, 2 * LIMIT);
    await expect(atSmall.waitReply(big, 3_000)).rejects.toThrow(/timed out/);
    // The peer is not cut off for one oversized frame: a small envelope is answered.
    const ok = await hello(atSmall, small, 16);
    expect((await atSmall.waitReply(ok, 10_000)).from.addr.host).toBe(small.peerId);
  });

  it('control: a node on the default limit answers the same 8 KiB envelope', { timeout: 30_000 }, async () => {
    const big = await hello(atUsual, usual, 2 * LIMIT);
    expect((await atUsual.waitReply(big, 10_000)).from.addr.host).toBe(usual.peerId);
  });

  it('a node set to 4 KiB refuses to send an 8 KiB envelope (413 naming the limit); a small one reaches the peer', { timeout: 30_000 }, async () => {
    const invoke = (bytes: number, cont: string) => {
      const exp = nowNs() + msToNs(2_000);
      const msg = Buffer.from(JSON.stringify({ pad: 'x'.repeat(bytes) })).toString('base64');
      return post(
        `${small.url}/api/v1/actor/invoke`,
        `{"to":{"addr":{"host":"${atSmall.host}","inbox":"root"}},"be":"/public/hello","from":{"addr":{"host":"","inbox":"caller"}},"nonce":${nextNonce()},"opt":{"exp":${exp},"cont":"${cont}"},"msg":"${msg}"}`,
      );
    };
    const refused = await invoke(2 * LIMIT, '/private/r/big');
    expect(refused.status, refused.text).toBe(413);
    expect(refused.json?.error).toMatch(new RegExp(`over the ${LIMIT}-byte network limit`));
    expect(atSmall.arrived.find((e) => e.opt.cont === '/private/r/big')).toBeUndefined();
    // The peer never answers: the small call ends at its expiry, after reaching the peer.
    const sent = await invoke(16, '/private/r/small');
    expect(sent.status, sent.text).toBe(408);
    expect(atSmall.arrived.find((e) => e.opt.cont === '/private/r/small')).toBeDefined();
  });
});
