import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { HttpActor } from '../../http/actor.js';
import { collectReplies } from '../../runtime/actor.js';
import { createApp } from '../../http/app.js';
import { BehaviorRegistry, replyWaiter } from '../../runtime/behavior.js';
import { makeActor } from '../../runtime/component.js';
import { defaultConfig } from '../../runtime/config.js';
import { KeyPair } from '../../runtime/crypto/keys.js';
import { DmsError } from '../../runtime/errors.js';
import { silentLogger } from '../../runtime/log.js';
import { Mailbox, OWN_SENDER } from '../../runtime/mailbox.js';
import { ReplayCache } from '../../runtime/replay.js';
import { ActorSystem, type SystemEvent } from '../../runtime/system.js';
import { decodePayload } from '../../runtime/wire/envelope.js';
import { waitFor } from '../helpers/network.js';
import { testActor } from '../helpers/actor.js';

const newSystem = (capacity = 16, concurrency = 4) =>
  new ActorSystem({ key: KeyPair.generate(), log: silentLogger(), mailbox: { capacity, concurrency }, replayCapacity: 1000 });

describe('Mailbox', () => {
  it('processes everything it accepted and refuses past capacity, never dropping', async () => {
    const seen: number[] = [];
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    const mb = new Mailbox<number>('t', { capacity: 3, concurrency: 1 }, async (n) => {
      await gate;
      seen.push(n);
    }, () => {});
    mb.post(1);
    mb.post(2);
    mb.post(3);
    expect(() => mb.post(4)).toThrowError(/mailbox of actor t is full \(3 envelopes\)/);
    let refused: unknown;
    try {
      mb.post(5);
    } catch (e) {
      refused = e;
    }
    // Fails if the post was accepted: the mailbox is still full.
    expect(refused).toBeInstanceOf(DmsError);
    expect((refused as DmsError).kind).toBe('overloaded');
    release();
    await mb.close();
    expect(seen).toEqual([1, 2, 3]);
    expect(() => mb.post(6)).toThrowError(/not running/);
  });

  it('keeps going after a handler throws', async () => {
    const errors: unknown[] = [];
    const seen: number[] = [];
    const mb = new Mailbox<number>('t', { capacity: 10, concurrency: 2 }, (n) => {
      if (n === 2) throw new Error('boom');
      seen.push(n);
    }, (e) => errors.push(e));
    [1, 2, 3].forEach((n) => mb.post(n));
    await mb.close();
    expect(seen.sort()).toEqual([1, 3]);
    expect(errors).toHaveLength(1);
  });
});

describe('Mailbox, by sender', () => {
  /** A mailbox of one slot whose items wait for `release`, recording the order they ran in. */
  function gated(capacity: number) {
    const ran: string[] = [];
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    const mb = new Mailbox<string>('t', { capacity, concurrency: 1 }, async (item) => {
      ran.push(item);
      await gate;
    }, () => {});
    return { mb, ran, release: () => release() };
  }

  it('takes senders in turns, each sender in its own order: one with many waiting goes no more often than one with few', async () => {
    const { mb, ran, release } = gated(64);
    for (let i = 1; i <= 6; i++) mb.post(`flood-${i}`, 'peer:flood');
    mb.post('honest-1', 'peer:honest');
    mb.post('honest-2', 'peer:honest');
    mb.post('own-1');
    release();
    await mb.close();
    // First come first served, the honest ones ran 7th and 8th.
    expect(ran).toEqual(['flood-1', 'flood-2', 'honest-1', 'own-1', 'flood-3', 'honest-2', 'flood-4', 'flood-5', 'flood-6']);
  });

  it('refuses a sender past its share of the capacity while the others still get in, and forgets a sender once it holds nothing', async () => {
    const { mb, release } = gated(8);
    expect(mb.perGroup).toBe(2);
    mb.post('a', 'peer:flood');
    mb.post('b', 'peer:flood');
    expect(() => mb.post('c', 'peer:flood')).toThrowError(new DmsError('overloaded', 'mailbox of actor t holds 2 envelopes from this sender, the most it may of 8; retry later', { retryAfter: 1 }));
    mb.post('d', 'peer:honest');
    mb.post('e', 'peer:honest');
    // The node's own, and the operator's calls in the node's group, are bounded by the capacity alone.
    for (const x of ['f', 'g']) mb.post(x);
    for (const x of ['h', 'i']) mb.post(x, 'rest', OWN_SENDER);
    expect(() => mb.post('j')).toThrowError(/mailbox of actor t is full \(8 envelopes\)/);
    expect(mb.size).toBe(8);
    release();
    await mb.close();
    expect(mb.size).toBe(0);
    const maps = mb as unknown as { lanes: Map<string, unknown>; groups: Map<string, unknown> };
    expect([maps.lanes.size, maps.groups.size]).toEqual([0, 0]);
  });

  it('counts the peers of one host against one share, and takes them in the host’s turn', async () => {
    const { mb, ran, release } = gated(64);
    // Sixteen identities on one host, 1 each, fill its share: a seventeenth is refused.
    for (let i = 0; i < 16; i++) mb.post(`sybil-${i}`, `peer:s${i}`, 'host:10.0.0.1');
    expect(mb.perGroup).toBe(16);
    expect(() => mb.post('sybil-16', 'peer:s16', 'host:10.0.0.1')).toThrowError(/holds 16 envelopes from the peers of this sender’s host, the most it may of 64/);
    mb.post('honest', 'peer:h', 'host:10.0.0.2');
    release();
    await mb.close();
    // sybil-0 ran as it came; then the two hosts in turn: the honest peer's one waits for one of the sybils', not fifteen.
    expect(ran.slice(0, 4)).toEqual(['sybil-0', 'sybil-1', 'honest', 'sybil-2']);
  });

  it('past half its capacity takes only from groups holding fewer than 16', async () => {
    const { mb, release } = gated(128);
    // Two hosts' shares (32 each) fill half of it.
    for (const host of ['a', 'b']) for (let i = 0; i < 32; i++) mb.post(`${host}-${i}`, `peer:${host}${i}`, `host:${host}`);
    // A third host gets 16 in, then is refused though within its share.
    for (let i = 0; i < 16; i++) mb.post(`c-${i}`, `peer:c${i}`, 'host:c');
    expect(() => mb.post('c-16', 'peer:c16', 'host:c')).toThrowError(new DmsError('overloaded', 'mailbox of actor t is half full (80 of 128) and holds 16 envelopes from the peers of this sender’s host; retry later', { retryAfter: 1 }));
    // The node's own and a host holding little still get in.
    mb.post('own');
    mb.post('e-0', 'peer:e0', 'host:e');
    release();
    await mb.close();
  });

  it('processes every item of many senders exactly once, past the compaction of its turns', async () => {
    const seen = new Map<string, number[]>();
    const mb = new Mailbox<[string, number]>('t', { capacity: 100_000, concurrency: 3 }, async ([sender, n]) => {
      await Promise.resolve();
      if (!seen.has(sender)) seen.set(sender, []);
      seen.get(sender)!.push(n);
    }, () => {});
    for (let n = 0; n < 3_000; n++) for (const sender of ['a', 'b', 'c']) mb.post([sender, n], `peer:${sender}`);
    for (let n = 0; n < 500; n++) mb.post(['own', n]);
    await mb.close();
    const upTo = (k: number) => Array.from({ length: k }, (_, i) => i);
    expect(Object.fromEntries(seen)).toEqual({ a: upTo(3_000), b: upTo(3_000), c: upTo(3_000), own: upTo(500) });
  });
});

describe('BehaviorRegistry', () => {
  const b = (name: string) => ({ name, handle: () => ({}) });

  it('adds, removes and lists', () => {
    const r = new BehaviorRegistry();
    r.add(b('/a'));
    r.add(b('/b'));
    expect(r.names()).toEqual(['/a', '/b']);
    expect(r.remove('/a')).toBe(true);
    expect(r.remove('/a')).toBe(false);
    expect(r.has('/b')).toBe(true);
  });

  it('takes a one-shot behavior once', () => {
    const r = new BehaviorRegistry();
    r.add(b('/once'), { once: true });
    expect(r.take('/once')).toBeDefined();
    expect(r.take('/once')).toBeUndefined();
  });

  it('expires a behavior and tells its owner', async () => {
    const r = new BehaviorRegistry();
    let expired = 0;
    r.add(b('/soon'), { expiresAt: Date.now() + 30, onExpire: () => expired++ });
    expect(r.has('/soon')).toBe(true);
    await waitFor('the expiry', () => expired > 0, { intervalMs: 10 });
    expect(r.has('/soon')).toBe(false);
    expect(expired).toBe(1);
  });

  it('does not fire the expiry of a behavior taken before it expired', async () => {
    const r = new BehaviorRegistry();
    let expired = 0;
    let controlExpired = false;
    const at = Date.now() + 20;
    r.add(b('/x'), { once: true, expiresAt: at, onExpire: () => expired++ });
    // A twin expiring a little later and not taken: once its expiry has fired, the taken one's
    // would have too.
    r.add(b('/control'), { expiresAt: at + 20, onExpire: () => (controlExpired = true) });
    r.take('/x');
    await waitFor('the twin to expire', () => controlExpired, { intervalMs: 10 });
    expect(expired).toBe(0);
  });
});

describe('ReplayCache', () => {
  it('rejects a repeated pair until it expires', () => {
    const c = new ReplayCache(10);
    c.admit('a', 1n, 100n, 0n);
    expect(() => c.admit('a', 1n, 100n, 50n)).toThrow(/replayed/);
    c.admit('b', 1n, 300n, 50n);
    c.admit('a', 1n, 200n, 150n); // the first one expired at 100
    expect(c.size).toBe(2);
  });

  it('refuses rather than forgets when full of unexpired entries', () => {
    const c = new ReplayCache(2);
    c.admit('a', 1n, 100n, 0n);
    c.admit('a', 2n, 100n, 0n);
    expect(() => c.admit('a', 3n, 100n, 0n)).toThrow(/replay cache is full/);
    c.admit('a', 3n, 300n, 150n); // expired entries make room
  });
});

describe('Actor', () => {
  it('walks its lifecycle starting → running → stopping → stopped', async () => {
    const system = newSystem();
    const states: string[] = [];
    system.events.subscribe((e: SystemEvent) => e.type === 'lifecycle' && e.actor === 'a' && states.push(e.state));
    const actor = await testActor(system, { inbox: 'a' });
    expect(actor.state).toBe('running');
    await actor.stop();
    expect(actor.state).toBe('stopped');
    expect(states).toEqual(['running', 'stopping', 'stopped']);
    expect(system.inbox('a')).toBeUndefined();
  });

  it('invokes another actor and gets its signed reply', async () => {
    const system = newSystem();
    const echo = await testActor(system, { inbox: 'echo', behaviors: [{ name: '/echo', handle: ({ payload }) => ({ echoed: payload }) }] });
    const caller = await testActor(system, { inbox: 'caller' });
    const reply = await caller.invoke(echo.handle, '/echo', { n: 1 });
    expect(reply.payload).toEqual({ echoed: { n: 1 } });
    expect(reply.env.from.addr.inbox).toBe('echo');
    expect(caller.primary.behaviors.size).toBe(0);
  });

  it('times out an invoke at its expiry and cleans up', async () => {
    const system = newSystem();
    const silent = await testActor(system, { inbox: 'silent', behaviors: [{ name: '/x', noReply: true, handle: () => {} }] });
    const caller = await testActor(system, { inbox: 'caller' });
    await expect(caller.invoke(silent.handle, '/x', {}, { ttlMs: 50 })).rejects.toMatchObject({ kind: 'timeout' });
    expect(caller.primary.behaviors.size).toBe(0);
  });

  it('replies {error, kind} to a handler that throws and to a payload its schema refuses', async () => {
    const system = newSystem();
    const a = await testActor(system, {
      inbox: 'a',
      behaviors: [
        { name: '/fail', handle: () => { throw new DmsError('conflict', 'not now'); } },
        { name: '/typed', payload: z.strictObject({ n: z.number() }), handle: () => ({}) },
      ],
    });
    const caller = await testActor(system, { inbox: 'caller' });
    expect((await caller.invoke(a.handle, '/fail', {})).payload).toEqual({ error: 'not now', kind: 'conflict' });
    expect((await caller.invoke(a.handle, '/typed', { n: 'x' })).payload).toMatchObject({ error: expect.stringMatching(/^invalid payload for \/typed/), kind: 'invalid' });
    // An unknown behavior is refused at routing, before any reply.
    await expect(caller.invoke(a.handle, '/nope', {})).rejects.toMatchObject({ kind: 'not_found' });
  });

  it('hands a payload its sender checked against the same schema over as it is, and checks any other', async () => {
    const system = newSystem();
    let parses = 0;
    const schema = z.strictObject({ n: z.number() }).transform((v) => {
      parses++;
      return v;
    });
    const seen: unknown[] = [];
    const a = await testActor(system, { inbox: 'a', behaviors: [{ name: '/typed', payload: schema, handle: ({ payload }) => void seen.push(payload) }] });
    const caller = await testActor(system, { inbox: 'caller' });
    const checked = schema.parse({ n: 1 });
    parses = 0;
    await caller.call(a.handle, '/typed', checked, z.unknown(), { checked: schema });
    expect(parses).toBe(0);
    expect(seen[0]).toBe(checked);
    // Checked against another schema, or not at all: decoded from msg and checked here.
    await caller.call(a.handle, '/typed', { n: 2 }, z.unknown(), { checked: z.strictObject({ n: z.number() }) });
    await caller.call(a.handle, '/typed', { n: 3 }, z.unknown());
    expect(parses).toBe(2);
    expect(seen.slice(1)).toEqual([{ n: 2 }, { n: 3 }]);
    // A sender's word is not a check: what it calls checked but is not is still its own payload.
    await expect(caller.call(a.handle, '/typed', { n: 'x' }, z.unknown(), { checked: z.unknown() })).rejects.toMatchObject({ kind: 'invalid' });
  });

  it('replies not_found for a behavior that went away while the envelope was queued', async () => {
    const system = newSystem();
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    const a = await testActor(system, {
      inbox: 'a',
      concurrency: 1,
      behaviors: [
        { name: '/block', handle: () => gate },
        { name: '/gone', handle: () => ({}) },
      ],
    });
    const caller = await testActor(system, { inbox: 'caller' });
    // Unsigned, so both are queued before invoke returns (a signature would be awaited first).
    const blocked = caller.invoke(a.handle, '/block', {}, { unsigned: true });
    const reply = caller.invoke(a.handle, '/gone', {}, { unsigned: true });
    a.remove('/gone');
    release();
    await blocked;
    expect((await reply).payload).toEqual({ error: 'no behavior /gone at actor a', kind: 'not_found' });
  });

  it('delivers a local broadcast to every subscriber of the topic', async () => {
    const system = newSystem();
    for (const name of ['s1', 's2']) await testActor(system, { inbox: name, topics: ['/t'], behaviors: [{ name: '/b', handle: () => ({ from: name }) }] });
    await testActor(system, { inbox: 'other', behaviors: [{ name: '/b', handle: () => ({ from: 'other' }) }] });
    const caller = await testActor(system, { inbox: 'caller' });
    const got: string[] = [];
    // Replies reach only a behavior that waits for them (an ordinary one would be reflection).
    caller.add(replyWaiter('/replies', (env) => got.push((decodePayload(env.msg) as { from: string }).from)), { expiresAt: Date.now() + 5_000 });
    await caller.send({ id: '', did: '', addr: { host: '', inbox: '' } }, '/b', {}, { topic: '/t', cont: '/replies' });
    await waitFor('two replies', () => got.length >= 2, { intervalMs: 10 });
    expect(got.sort()).toEqual(['s1', 's2']);
  });

  it('refuses to bind an inbox twice', async () => {
    const system = newSystem();
    await testActor(system, { inbox: 'x' });
    await expect(testActor(system, { inbox: 'x' })).rejects.toThrow(/already bound/);
  });
});

describe('collectReplies, the one collector of broadcast replies', () => {
  it('ends at max replies, the byte bound (leaving out a reply too large alone), a refused claim, enough, an abort or its time', async () => {
    // One at a time, so the replies reach the waiter in the order sent.
    const system = newSystem(16, 1);
    const a = await testActor(system, { inbox: 'a', concurrency: 1 });
    const replies = (cont: string, ...payloads: unknown[]) => {
      for (const p of payloads) system.deliverLocal(a.envelope(a.handle, cont, p), { reply: true });
    };
    const taken = async (p: Promise<{ msg: Uint8Array }[]>) => (await p).map((r) => decodePayload(r.msg));
    const until = Date.now() + 10_000;

    let p = collectReplies(a.primary, '/c/max', { until, max: 2, maxBytes: 1000 });
    replies('/c/max', { n: 1 }, { n: 2 }, { n: 3 });
    expect(await taken(p)).toEqual([{ n: 1 }, { n: 2 }]);

    // {"n":1} is 7 bytes: a second would pass 10.
    p = collectReplies(a.primary, '/c/bytes', { until, max: 5, maxBytes: 10 });
    replies('/c/bytes', { big: 'x'.repeat(20) }, { n: 1 }, { n: 2 });
    expect(await taken(p)).toEqual([{ n: 1 }]);

    let claims = 0;
    p = collectReplies(a.primary, '/c/claim', { until, max: 5, maxBytes: 1000, claim: () => ++claims < 2 });
    replies('/c/claim', { n: 1 }, { n: 2 });
    expect(await taken(p)).toEqual([{ n: 1 }]);

    p = collectReplies(a.primary, '/c/enough', { until, max: 5, maxBytes: 1000, enough: (r) => r.length === 1 });
    replies('/c/enough', { n: 1 }, { n: 2 });
    expect(await taken(p)).toEqual([{ n: 1 }]);

    const abort = new AbortController();
    p = collectReplies(a.primary, '/c/abort', { until, max: 5, maxBytes: 1000, signal: abort.signal });
    abort.abort();
    expect(await taken(p)).toEqual([]);

    const began = Date.now();
    expect(await taken(collectReplies(a.primary, '/c/time', { until: began + 50, max: 5, maxBytes: 1000 }))).toEqual([]);
    expect(Date.now() - began).toBeGreaterThanOrEqual(45);
    // Every waiter is gone once its collection ended.
    expect(a.primary.behaviors.size).toBe(0);
  });

  it('takes at most perHost of a host and only the hosts asked, and with keep false bounds each reply alone: one peer cannot use up the bounds', async () => {
    const system = newSystem(2048, 1);
    const a = await testActor(system, { inbox: 'a', concurrency: 1 });
    const from = (host: string, cont: string, p: unknown) => {
      const env = a.envelope(a.handle, cont, p);
      system.deliverLocal({ ...env, from: { ...env.from, addr: { ...env.from.addr, host } } }, { reply: true });
    };
    const taken = async (p: Promise<{ msg: Uint8Array }[]>) => (await p).map((r) => decodePayload(r.msg));
    const until = Date.now() + 10_000;
    const seen: unknown[] = [];
    const enough = (r: readonly { msg: Uint8Array }[]) => {
      seen.push(decodePayload(r[r.length - 1].msg));
      return seen.length === 3;
    };

    // A thousand answers of one host past its first do not reach max: the other hosts' come through.
    let p = collectReplies(a.primary, '/c/once', { until, max: 1024, maxBytes: 1 << 20, perHost: { replies: 1 }, enough });
    for (let i = 0; i < 1100; i++) from('hostile', '/c/once', { n: i });
    from('b', '/c/once', { n: 'b' });
    from('c', '/c/once', { n: 'c' });
    expect(await taken(p)).toEqual([{ n: 0 }, { n: 'b' }, { n: 'c' }]);

    // Two of a host's, and no more of its bytes than perHost.bytes ({"n":1} is 7 bytes): its others
    // are dropped, counting against neither max nor maxBytes, whatever their size.
    p = collectReplies(a.primary, '/c/two', { until, max: 4, maxBytes: 40, perHost: { replies: 2, bytes: 14 }, enough: (r) => r.length === 4 });
    from('hostile', '/c/two', { pad: 'x'.repeat(30) });
    for (let i = 1; i <= 5; i++) from('hostile', '/c/two', { n: i });
    from('b', '/c/two', { n: 7 });
    from('b', '/c/two', { n: 8, pad: 'x' });
    from('c', '/c/two', { n: 9 });
    expect(await taken(p)).toEqual([{ n: 1 }, { n: 2 }, { n: 7 }, { n: 9 }]);

    // Hosts not asked are not heard.
    seen.length = 0;
    p = collectReplies(a.primary, '/c/hosts', { until, max: 5, maxBytes: 1000, hosts: new Set(['b', 'c']), enough: (r) => r.length === 2 });
    from('stranger', '/c/hosts', { n: 's' });
    from('b', '/c/hosts', { n: 'b' });
    from('c', '/c/hosts', { n: 'c' });
    expect(await taken(p)).toEqual([{ n: 'b' }, { n: 'c' }]);

    // Not kept: replies near the byte bound each, together past it, are all handed to enough.
    seen.length = 0;
    p = collectReplies(a.primary, '/c/keep', { until, max: 5, maxBytes: 100, keep: false, enough });
    for (const host of ['x', 'y', 'z']) from(host, '/c/keep', { pad: host.repeat(80) });
    expect(await taken(p)).toEqual([]);
    expect(seen).toEqual(['x', 'y', 'z'].map((h) => ({ pad: h.repeat(80) })));
    expect(a.primary.behaviors.size).toBe(0);
  });
});

describe('HTTP actor before the node is initialized', () => {
  it('answers /api/v1/actor/handle with 500', async () => {
    const system = newSystem();
    const config = defaultConfig();
    const operator = KeyPair.generate();
    const http = await makeActor(system, HttpActor, {
      operator,
      allowUnsigned: true,
      maxPending: 10,
      maxBroadcastReplies: 10,
      rootInbox: 'root',
    });
    await http.start();
    const app = createApp({ config, system, http: http.api, log: silentLogger() });
    const res = await app.fetch(new Request('http://localhost/api/v1/actor/handle'));
    expect(res.status).toBe(500);
    expect(await res.json()).toEqual({ error: 'node is not initialized' });
  });
});
