// The one actor shape (runtime/component.ts), the start order (runtime/start-order.ts) and the
// node's one machine inspector, on a bare kernel.
import { setup } from 'xstate';
import { describe, expect, it, onTestFinished } from 'vitest';
import { defineBehavior } from '../../runtime/behavior.js';
import { type ActorContext, defineActor, makeActor } from '../../runtime/component.js';
import { KeyPair } from '../../runtime/crypto/keys.js';
import { DmsError } from '../../runtime/errors.js';
import { silentLogger } from '../../runtime/log.js';
import { StartOrder } from '../../runtime/start-order.js';
import { ActorSystem, type SystemEvent } from '../../runtime/system.js';
import { emptyHandle } from '../../runtime/actor.js';
import { testActor } from '../helpers/actor.js';

/** A kernel stopped when the test ends, whatever its assertions did. */
const newSystem = () => {
  const system = new ActorSystem({ key: KeyPair.generate(), log: silentLogger(), mailbox: { capacity: 16, concurrency: 8 }, replayCapacity: 100 });
  onTestFinished(() => system.stop());
  return system;
};

const Counter = defineActor({
  inbox: 'counter',
  concurrency: 1,
  create: ({ deps }: ActorContext<{ start: number; log: string[] }>) => {
    let n = deps.start;
    return {
      behaviors: [defineBehavior({ name: '/count', handle: () => ++n })],
      api: { value: () => n },
      start: () => void deps.log.push('counter started'),
      stop: () => void deps.log.push('counter stopped'),
    };
  },
});

const to = (inbox: string) => ({ ...emptyHandle(), addr: { host: '', inbox } });

describe('defineActor / makeActor', () => {
  it('binds the inbox only at start, injects the dependencies, and unbinds at stop', async () => {
    const system = newSystem();
    const log: string[] = [];
    const counter = await makeActor(system, Counter, { start: 41, log });
    expect(system.inbox('counter')).toBeUndefined();
    await counter.start();
    const client = await testActor(system, { inbox: 'client' });
    const reply = await client.invoke<number>(to('counter'), '/count', {}, { unsigned: true });
    expect(reply.payload).toBe(42);
    expect(counter.api.value()).toBe(42);
    await counter.stop();
    expect(system.inbox('counter')).toBeUndefined();
    expect(system.actor('counter')).toBeUndefined();
    expect(log).toEqual(['counter started', 'counter stopped']);
  });

  it('uses the concurrency the definition states', async () => {
    const system = newSystem();
    let inFlight = 0;
    let most = 0;
    const Slow = defineActor({
      inbox: 'slow',
      concurrency: 2,
      create: () => ({
        behaviors: [
          defineBehavior({
            name: '/slow',
            handle: async () => {
              most = Math.max(most, ++inFlight);
              await new Promise((r) => setTimeout(r, 20));
              inFlight--;
            },
          }),
        ],
      }),
    });
    const slow = await makeActor(system, Slow, {});
    await slow.start();
    const client = await testActor(system, { inbox: 'client' });
    await Promise.all(Array.from({ length: 6 }, () => client.invoke(to('slow'), '/slow', {}, { unsigned: true })));
    expect(most).toBe(2);
  });
});

describe('StartOrder', () => {
  it('stops what started, newest first, when a later step fails, and names a plain fault by its step', async () => {
    const order = new StartOrder(silentLogger());
    const stopped: string[] = [];
    await order.step('database', () => 'db', () => void stopped.push('database'));
    await order.step('network', () => 'net', () => void stopped.push('network'));
    const failed = await order.step('executors', () => Promise.reject(new Error('socket gone'))).catch((e: unknown) => e);
    expect(failed).toBeInstanceOf(DmsError);
    expect((failed as DmsError).message).toBe('start-up failed at executors: socket gone');
    expect(stopped).toEqual(['network', 'database']);
  });

  it('keeps a DmsError\'s own words, which already name the setting', async () => {
    const order = new StartOrder(silentLogger());
    const e = await order.step('plugins', () => Promise.reject(new DmsError('invalid', 'plugins.modules: no such module'))).catch((x: unknown) => x);
    expect((e as DmsError).message).toBe('plugins.modules: no such module');
    expect((e as { step?: string }).step).toBe('plugins');
  });

  it('stops components in reverse order of their start', async () => {
    const system = newSystem();
    const log: string[] = [];
    const order = new StartOrder(silentLogger());
    await order.component('counter', () => makeActor(system, Counter, { start: 0, log }));
    await order.step('after', () => log.push('after started'), () => void log.push('after stopped'));
    await order.stop();
    expect(log).toEqual(['counter started', 'after started', 'after stopped', 'counter stopped']);
  });
});

describe('the node\'s machine inspector', () => {
  it('turns every state change of a machine a component owns into a transition event, in order', async () => {
    const system = newSystem();
    const events: SystemEvent[] = [];
    system.events.subscribe((e) => events.push(e));
    const light = setup({ types: { events: {} as { type: 'next' } } }).createMachine({
      id: 'light',
      initial: 'green',
      states: { green: { on: { next: 'yellow' } }, yellow: { on: { next: 'red' } }, red: { type: 'final' } },
    });
    const Lamp = defineActor({
      inbox: 'lamp',
      concurrency: 1,
      create: ({ machine }: ActorContext<object>) => {
        const m = machine(light);
        return { behaviors: [], api: { m }, start: () => void m.start() };
      },
    });
    const lamp = await makeActor(system, Lamp, {});
    await lamp.start();
    lamp.api.m.send({ type: 'next' });
    lamp.api.m.send({ type: 'next' });
    const transitions = events.filter((e) => e.type === 'transition' && e.machine === 'light');
    expect(transitions).toEqual([
      { type: 'transition', actor: 'lamp', machine: 'light', from: '(start)', to: 'green', event: 'xstate.init' },
      { type: 'transition', actor: 'lamp', machine: 'light', from: 'green', to: 'yellow', event: 'next' },
      { type: 'transition', actor: 'lamp', machine: 'light', from: 'yellow', to: 'red', event: 'next' },
    ]);
  });
});
