import { Writable } from 'node:stream';
import { pino } from 'pino';
import { describe, expect, it } from 'vitest';
import { notWaiting } from '../../runtime/behavior.js';
import { KeyPair } from '../../runtime/crypto/keys.js';
import { signEnvelopeSync } from '../helpers/envelopes.js';
import { DmsError } from '../../runtime/errors.js';
import { silentLogger, type Logger } from '../../runtime/log.js';
import { ActorSystem, type SystemEvent } from '../../runtime/system.js';
import { msToNs, nextNonce, nowNs } from '../../runtime/time.js';
import { encodePayload, type Envelope } from '../../runtime/wire/envelope.js';
import { testActor } from '../helpers/actor.js';

const newSystem = (log: Logger = silentLogger()) => new ActorSystem({ key: KeyPair.generate(), log, mailbox: { capacity: 16, concurrency: 4 }, replayCapacity: 1000 });

function nextEvent(system: ActorSystem, pred: (e: SystemEvent) => boolean): Promise<SystemEvent> {
  return new Promise((resolve, reject) => {
    // A bound for a loaded machine: the event normally comes within milliseconds.
    const timer = setTimeout(() => reject(new Error('no such event within 20 s')), 20_000);
    const sub = system.events.subscribe((e) => {
      if (!pred(e)) return;
      clearTimeout(timer);
      sub.unsubscribe();
      resolve(e);
    });
  });
}

describe('replies the kernel routes', () => {
  it('never run an ordinary behavior: a request whose from/cont name one gets its reply dead-lettered', async () => {
    const system = newSystem();
    let ran = 0;
    await testActor(system, { inbox: 'root', behaviors: [{ name: '/public/hello', handle: () => ({ hi: true }) }] });
    await testActor(system, { inbox: 'victim', behaviors: [{ name: '/victim/act', handle: () => { ran++; } }] });
    const stranger = KeyPair.generate();
    const env: Envelope = signEnvelopeSync(
      {
        to: { id: '', did: '', addr: { host: '', inbox: 'root' } },
        be: '/public/hello',
        from: { id: stranger.id, did: stranger.did, addr: { host: system.host, inbox: 'victim' } },
        nonce: nextNonce(),
        opt: { exp: nowNs() + msToNs(5_000), cont: '/victim/act' },
        msg: encodePayload({}),
      },
      stranger,
    );
    const dropped = nextEvent(system, (e) => e.type === 'dead-letter' && e.env.be === '/victim/act');
    await system.accept(env, { kind: 'rest', trusted: false });
    const event = await dropped;
    expect(event.type === 'dead-letter' && event.reason).toBe(notWaiting('victim', '/victim/act'));
    expect(event.type === 'dead-letter' && event.env.from.id).toBe(system.key.id);
    expect(ran).toBe(0);
  });

  it('still reach the reply waiter of an invoke, and an ordinary send still reaches its behavior', async () => {
    const system = newSystem();
    let ran = 0;
    const target = await testActor(system, { inbox: 't', behaviors: [{ name: '/t/do', handle: () => { ran++; return { n: ran }; } }] });
    const caller = await testActor(system, { inbox: 'c' });
    expect((await caller.invoke(target.handle, '/t/do', {})).payload).toEqual({ n: 1 });
    const delivered = nextEvent(system, (e) => e.type === 'deliver' && e.env.be === '/t/do');
    await caller.send(target.handle, '/t/do', {});
    await delivered;
    await target.stop();
    expect(ran).toBe(2);
  });
});

describe('a handler that throws something other than a DmsError', () => {
  it('answers "internal error (id …)" and logs the real error under the same id', async () => {
    const lines: string[] = [];
    const sink = new Writable({ write: (chunk, _enc, done) => { lines.push(String(chunk)); done(); } });
    const system = newSystem(pino({ level: 'info' }, sink));
    const a = await testActor(system, {
      inbox: 'a',
      behaviors: [
        { name: '/boom', handle: () => { throw new Error('db password hunter2 at /etc/secret'); } },
        { name: '/refuse', handle: () => { throw new DmsError('conflict', 'not now'); } },
      ],
    });
    const caller = await testActor(system, { inbox: 'caller' });
    const reply = (await caller.invoke<{ error: string }>(a.handle, '/boom', {})).payload;
    expect(reply).toMatchObject({ kind: 'internal' });
    const id = /^internal error \(id ([0-9a-f]{8})\)$/.exec(reply.error)?.[1];
    expect(id, reply.error).toBeDefined();
    const logged = lines.map((l) => JSON.parse(l)).find((l) => l.error_id === id);
    expect(logged).toMatchObject({ level: 50, be: '/boom', actor: 'a', msg: `behavior failed: internal error (id ${id})` });
    expect(logged.err.message).toBe('db password hunter2 at /etc/secret');
    // Two failures, two ids.
    const again = (await caller.invoke<{ error: string }>(a.handle, '/boom', {})).payload.error;
    expect(again).not.toBe(reply.error);
    // A DmsError is meant for the caller and reaches it as it is.
    expect((await caller.invoke(a.handle, '/refuse', {})).payload).toEqual({ error: 'not now', kind: 'conflict' });
  });
});

describe('replies to an actor whose every handler waits on a call', () => {
  it('reach their waiters at once: a reply never queues behind the requests that wait for it', async () => {
    // Found on a provider under a burst of placements: its deployment actor's 64 handlers each
    // awaited a call, the replies queued in the same mailbox behind more requests, and every
    // call timed out together, 5 s later.
    const system = newSystem();
    const echo = await testActor(system, { inbox: 'echo', behaviors: [{ name: '/echo', handle: ({ payload }) => payload }] });
    const relay = await testActor(system, {
      inbox: 'relay',
      concurrency: 2,
      behaviors: [{ name: '/relay', handle: async ({ actor, payload }) => (await actor.invoke(echo.handle, '/echo', payload, { ttlMs: 10_000 })).payload }],
    });
    const caller = await testActor(system, { inbox: 'caller' });
    const started = performance.now();
    // Four requests on two slots: the first two wait for replies that would queue behind the last two.
    const answers = await Promise.all([1, 2, 3, 4].map((n) => caller.invoke(relay.handle, '/relay', { n }, { ttlMs: 10_000 })));
    expect(answers.map((a) => a.payload)).toEqual([1, 2, 3, 4].map((n) => ({ n })));
    // The deadlock lasts until the relayed calls expire (10 s); without it this takes milliseconds.
    expect(performance.now() - started).toBeLessThan(5_000);
  }, 20_000);
});

describe('a flood of replies to one waiter', () => {
  it('gives the waiter the first; the rest are dropped as dead letters, and the actor goes on serving', async () => {
    // Replies skip the mailbox's queue (and so its capacity): what bounds them is that only a
    // waiter takes one, and a one-shot waiter is gone after the first.
    const system = newSystem();
    const silent = await testActor(system, { inbox: 'silent', behaviors: [{ name: '/never', handle: () => new Promise(() => {}) }] });
    const echo = await testActor(system, { inbox: 'echo', behaviors: [{ name: '/echo', handle: ({ payload }) => payload }] });
    const caller = await testActor(system, { inbox: 'caller' });
    const sent = nextEvent(system, (e) => e.type === 'send' && e.env.be === '/never');
    const asked = caller.invoke(silent.handle, '/never', {}, { ttlMs: 10_000 });
    const ev = await sent;
    const cont = ev.type === 'send' ? ev.env.opt.cont! : '';
    let dead = 0;
    const sub = system.events.subscribe((e) => {
      if (e.type === 'dead-letter' && e.env.be === cont) dead++;
    });
    const replies = Array.from({ length: 200 }, (_, n): Envelope => ({
      to: caller.handle,
      be: cont,
      from: silent.handle,
      nonce: nextNonce(),
      opt: { exp: nowNs() + msToNs(5_000) },
      msg: encodePayload({ n }),
    }));
    const outcomes = await Promise.allSettled(replies.map((r) => system.accept(r, { kind: 'local' })));
    expect((await asked).payload).toEqual({ n: 0 });
    // Each later one was refused at the kernel (its waiter gone) or dropped at dispatch.
    await new Promise((r) => setTimeout(r, 50));
    sub.unsubscribe();
    expect(outcomes.filter((o) => o.status === 'rejected').length + dead).toBe(199);
    expect((await caller.invoke(echo.handle, '/echo', { again: true })).payload).toEqual({ again: true });
  });
});

describe('a reply waiter that expires before anyone awaits it', () => {
  // The waiter is set before the request is sent, and sending can outlast the expiry (a burst's
  // signature checks ahead of it): its rejection then had no handler yet and stopped the node.
  it('raises no unhandled rejection, and whoever awaits it after still hears the timeout', async () => {
    const system = newSystem();
    const caller = await testActor(system, { inbox: 'c' });
    const unhandled: unknown[] = [];
    const onUnhandled = (e: unknown) => void unhandled.push(e);
    process.on('unhandledRejection', onUnhandled);
    try {
      const reply = caller.awaitReply(caller.primary, '/private/reply/late', nowNs() + msToNs(20), system.host);
      await new Promise((r) => setTimeout(r, 200));
      expect(unhandled).toEqual([]);
      await expect(reply).rejects.toThrow('no reply before opt.exp (/private/reply/late)');
    } finally {
      process.off('unhandledRejection', onUnhandled);
      await caller.stop();
    }
  });
});
