import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { KeyPair } from '../../runtime/crypto/keys.js';
import { msToNs, nowNs } from '../../runtime/time.js';
import { decodePayload, encodeEnvelope, type Envelope } from '../../runtime/wire/envelope.js';
import { type Caller, envelope, newCaller, post, rootOf } from '../helpers/envelopes.js';
import { DevEvents } from '../helpers/network.js';
import { type NodeProcess, removeHome, startNode, tempHome } from '../helpers/node.js';
import { ForeignPeer } from '../helpers/peer.js';

/**
 * The replay cache against real node processes: a sender cannot push `opt.exp` beyond
 * `actor.max_ttl_s`, cannot hold more than `actor.replay_per_sender` entries, throwaway keys
 * together cannot starve the operator, the same checks hold for envelopes that arrive over
 * libp2p, and what was accepted stays refused across a restart (clean or killed).
 */

const U64_MAX = 2n ** 64n - 1n;
const MAX_TTL_S = 120;

const sendTo = (node: NodeProcess, env: Envelope) => post(`${node.url}/api/v1/actor/send`, encodeEnvelope(env));
const hello = (node: NodeProcess, caller: Caller, b: { exp?: bigint; ttlMs?: number; nonce?: bigint } = {}) =>
  envelope(caller, { to: rootOf(node.peerId), be: '/public/hello', host: node.peerId, ttlMs: b.ttlMs ?? 60_000, exp: b.exp, nonce: b.nonce });

async function healthy(node: NodeProcess): Promise<void> {
  expect((await fetch(`${node.url}/health`)).status).toBe(200);
  const res = await post(`${node.url}/api/v1/actor/invoke`, encodeEnvelope(envelope(newCaller(), { to: rootOf(node.peerId), be: '/public/hello', cont: '/private/r', host: node.peerId })));
  expect(res.status, res.text).toBe(200);
}

describe('opt.exp is bounded by actor.max_ttl_s, and replays are refused, on REST and on the network', () => {
  let node: NodeProcess;
  let peer: ForeignPeer;
  let watch: DevEvents;

  beforeAll(async () => {
    node = await startNode({ env: { DMS_DEBUG: 'true' }, config: { actor: { max_ttl_s: MAX_TTL_S } } });
    peer = await ForeignPeer.connectedTo(node);
    watch = await DevEvents.open(node.url, ['dead-letter', 'envelope']);
  }, 60_000);
  afterAll(async () => {
    watch?.close();
    await peer?.stop();
    await node?.stop();
    if (node) removeHome(node.home);
  });

  it('REST: refuses an exp beyond the bound with 400 naming opt.exp, accepts one within it', async () => {
    const caller = newCaller();
    for (const exp of [U64_MAX, nowNs() + msToNs((MAX_TTL_S + 60) * 1000)]) {
      const res = await sendTo(node, hello(node, caller, { exp }));
      expect(res.status, res.text).toBe(400);
      expect(res.json.error).toBe(`opt.exp is more than actor.max_ttl_s (${MAX_TTL_S} s) ahead`);
    }
    expect((await sendTo(node, hello(node, caller, { ttlMs: (MAX_TTL_S - 30) * 1000 }))).status).toBe(200);
    await healthy(node);
  });

  it('network: an envelope from a foreign peer is delivered once; its replay, an expired one and a too-far one are refused', async () => {
    const dropped = async (env: Envelope) => {
      const e = await watch.waitFor(`the dead letter of nonce ${env.nonce}`, (e) => e.type === 'dead-letter' && e.nonce === String(env.nonce));
      return e.type === 'dead-letter' ? e : { reason: `not a dead letter: ${e.type}` };
    };
    const delivered = (env: Envelope) => watch.find((e) => e.type === 'envelope' && e.direction === 'in' && e.nonce === String(env.nonce));

    const honest = peer.envelope(node, { be: '/public/hello', cont: '/private/r/once' });
    await peer.send(honest);
    const reply = await peer.waitReply('/private/r/once');
    expect(decodePayload(reply.msg)).toEqual({ did: node.did });
    // The dev stream is a connection of its own: its event may come after the reply did.
    await watch.waitFor(`the delivery of nonce ${honest.nonce}`, (e) => e.type === 'envelope' && e.direction === 'in' && e.nonce === String(honest.nonce));

    // The same bytes again, on the same stream.
    await peer.send(honest);
    expect((await dropped(honest)).reason).toBe('replayed envelope: this (from.id, nonce) was already delivered');

    const expired = peer.envelope(node, { be: '/public/hello', cont: '/private/r/expired', exp: nowNs() - msToNs(1_000) });
    await peer.send(expired);
    expect((await dropped(expired)).reason).toBe('envelope expired: opt.exp is in the past');

    const far = peer.envelope(node, { be: '/public/hello', cont: '/private/r/far', exp: U64_MAX });
    await peer.send(far);
    expect((await dropped(far)).reason).toBe(`opt.exp is more than actor.max_ttl_s (${MAX_TTL_S} s) ahead`);

    // A fresh envelope after them is answered: the stream still works, so silence meant refusal.
    await peer.send(peer.envelope(node, { be: '/public/hello', cont: '/private/r/after' }));
    await peer.waitReply('/private/r/after');
    expect(peer.replies('/private/r/once')).toHaveLength(1);
    expect(peer.replies('/private/r/expired')).toEqual([]);
    expect(peer.replies('/private/r/far')).toEqual([]);
    expect(watch.events.filter((e) => e.type === 'envelope' && e.direction === 'in' && e.nonce === String(honest.nonce))).toHaveLength(1);
    expect(delivered(expired)).toBeUndefined();
    expect(delivered(far)).toBeUndefined();
    await healthy(node);
  });
});

describe('replay cache shares', () => {
  // Small on purpose: 100 entries, 20 per sender; throwaway keys may use 90 of them.
  const CAPACITY = 100;
  const PER_SENDER = 20;
  let node: NodeProcess;

  beforeAll(async () => {
    node = await startNode({ config: { network: { enabled: false }, actor: { replay_capacity: CAPACITY, replay_per_sender: PER_SENDER } } });
  }, 60_000);
  afterAll(async () => {
    await node?.stop();
    if (node) removeHome(node.home);
  });

  it('one throwaway key flooding with far and near expiries holds at most replay_per_sender entries; others are unaffected', async () => {
    const attacker = newCaller();
    // The original attack: exp = 2^64-1, which would have stayed in the cache for good.
    for (let i = 0; i < 30; i++) expect((await sendTo(node, hello(node, attacker, { exp: U64_MAX }))).status).toBe(400);
    const statuses: number[] = [];
    let refusal = '';
    for (let i = 0; i < PER_SENDER + 10; i++) {
      const res = await sendTo(node, hello(node, attacker));
      statuses.push(res.status);
      if (res.status === 503) refusal = res.json.error;
    }
    expect(statuses.filter((s) => s === 200)).toHaveLength(PER_SENDER);
    expect(statuses.slice(PER_SENDER)).toEqual(Array(10).fill(503));
    expect(refusal).toBe(`sender ${attacker.key!.id} already holds ${PER_SENDER} unexpired envelopes in the replay cache (actor.replay_per_sender); retry once some expire`);
    // Another sender, and the operator, are not affected.
    expect((await sendTo(node, hello(node, newCaller()))).status).toBe(200);
    expect((await sendTo(node, hello(node, { key: node.operator(), inbox: 'op' }))).status).toBe(200);
    await healthy(node);
  });

  it('many throwaway keys fill only their share: the operator is still served', async () => {
    let full: { status: number; error: string } | undefined;
    for (let k = 0; k < CAPACITY / PER_SENDER + 2 && !full; k++) {
      const caller = newCaller();
      for (let i = 0; i < PER_SENDER; i++) {
        const res = await sendTo(node, hello(node, caller));
        if (res.status !== 200) {
          full = { status: res.status, error: res.json.error };
          break;
        }
      }
    }
    expect(full).toEqual({ status: 503, error: 'replay cache is full of unexpired envelopes; retry later' });
    // Still full for strangers …
    expect((await sendTo(node, hello(node, newCaller()))).status).toBe(503);
    // … but the operator, signed or unsigned through trusted local REST, gets through.
    const operator: Caller = { key: node.operator(), inbox: 'op' };
    for (let i = 0; i < 5; i++) expect((await sendTo(node, hello(node, operator))).status).toBe(200);
    const unsigned = await post(`${node.url}/api/v1/actor/invoke`, encodeEnvelope(envelope(newCaller(false), { to: rootOf(node.peerId), be: '/public/hello', cont: '/private/r', host: node.peerId })));
    expect(unsigned.status, unsigned.text).toBe(200);
    expect((await fetch(`${node.url}/health`)).status).toBe(200);
  });
});

describe('the replay cache survives a restart', () => {
  let home: string;
  let node: NodeProcess | undefined;

  beforeAll(() => {
    home = tempHome();
  });
  afterAll(async () => {
    await node?.stop();
    removeHome(home);
  });

  const start = async () => (node = await startNode({ home, config: { network: { enabled: false } } }));

  it('refuses after a clean stop and after kill -9 what it accepted before, while unexpired', { timeout: 120_000 }, async () => {
    const caller: Caller = { key: KeyPair.generate(), inbox: 'replayer' };
    let n = await start();
    const first = hello(n, caller);
    expect((await sendTo(n, first)).status).toBe(200);
    expect(existsSync(join(home, 'replay.log'))).toBe(true);
    expect(await n.stop()).toBe(0);

    n = await start();
    const again = await sendTo(n, first);
    expect(again.status, again.text).toBe(400);
    expect(again.json.error).toBe('replayed envelope: this (from.id, nonce) was already delivered');
    const second = hello(n, caller);
    expect((await sendTo(n, second)).status).toBe(200);
    await n.kill();

    n = await start();
    for (const env of [first, second]) {
      const res = await sendTo(n, env);
      expect(res.status, res.text).toBe(400);
      expect(res.json.error).toBe('replayed envelope: this (from.id, nonce) was already delivered');
    }
    expect((await sendTo(n, hello(n, caller))).status).toBe(200);
    await healthy(n);
  });
});
