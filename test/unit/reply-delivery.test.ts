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
