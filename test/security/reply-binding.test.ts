import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { msToNs, nextNonce, nowNs } from '../../runtime/time.js';
import { decodePayload, parseEnvelope } from '../../runtime/wire/envelope.js';
import { post } from '../helpers/envelopes.js';
import { DevEvents, waitFor } from '../helpers/network.js';
import { type LocalNode, startLocalNode } from '../helpers/local-node.js';
import { removeHome } from '../helpers/node.js';
import { ForeignPeer } from '../helpers/peer.js';

/**
 * A reply is for the request that invited it, from the node that request went to. A REST
 * caller picks its own opt.cont, and the node's own calls name theirs after the nonce (a
 * timestamp), so a third peer can know or guess the name of a reply waiter. If the waiter took
 * whatever arrived under its name, that peer could answer in place of the node that was asked:
 * a forged job state or output where a requester polls its provider.
 */

let node: LocalNode;
let asked: ForeignPeer;
let forger: ForeignPeer;
let watch: DevEvents;

beforeAll(async () => {
  node = await startLocalNode({ env: { DMS_DEBUG: 'true' } });
  [asked, forger] = await Promise.all([ForeignPeer.connectedTo(node), ForeignPeer.connectedTo(node)]);
  watch = await DevEvents.open(node.url, ['dead-letter']);
}, 60_000);
afterAll(async () => {
  watch?.close();
  await asked?.stop();
  await forger?.stop();
  await node?.stop();
  if (node) removeHome(node.home);
});

/** A REST invoke (unsigned, so the node signs it) on `node` of `asked`'s root, with a cont of the caller's choosing. */
function invoke(cont: string, ttlMs: number): Promise<{ status: number; text: string; json: any }> {
  const exp = nowNs() + msToNs(ttlMs);
  const body = `{"to":{"addr":{"host":"${asked.host}","inbox":"root"}},"be":"/public/hello","from":{"addr":{"host":"${node.peerId}","inbox":"caller"}},"nonce":${nextNonce()},"opt":{"exp":${exp},"cont":"${cont}"},"msg":"e30="}`;
  return post(`${node.url}/api/v1/actor/invoke`, body);
}

describe('a reply from a peer other than the one invoked', () => {
  it('is dropped, and the caller gets the answer of the node it asked', async () => {
    const cont = `/private/r/bound-${Date.now()}`;
    const call = invoke(cont, 15_000);
    const req = await waitFor('the request at the asked peer', () => asked.arrived.find((e) => e.opt.cont === cont));
    // The forger knows the cont (the caller chose it) and answers first.
    const forged = forger.replyTo(req, { did: 'did:key:forged' });
    await forger.send(forged);
    const dropped = await watch.waitFor('the forged reply dropped', (e) => e.type === 'dead-letter' && e.nonce === String(forged.nonce));
    expect(dropped).toMatchObject({ reason: `reply to ${cont} from ${forger.host} dropped: the request went to ${asked.host}` });
    // The peer that was asked answers after it, and its answer is what the caller gets.
    await asked.send(asked.replyTo(req, { did: 'did:key:honest' }));
    const r = await call;
    expect(r.status, r.text).toBe(200);
    const reply = parseEnvelope(r.text);
    expect(reply.from.addr.host).toBe(asked.host);
    expect(decodePayload(reply.msg)).toEqual({ did: 'did:key:honest' });
  });

  it('does not end the wait: with no answer from the node asked, the caller times out', async () => {
    const cont = `/private/r/silent-${Date.now()}`;
    const call = invoke(cont, 3_000);
    const req = await waitFor('the request at the asked peer', () => asked.arrived.find((e) => e.opt.cont === cont));
    await forger.send(forger.replyTo(req, { did: 'did:key:forged' }));
    const r = await call;
    expect(r.status, r.text).toBe(408);
    expect((await fetch(`${node.url}/health`)).status).toBe(200);
  });
});
