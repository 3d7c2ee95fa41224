import { createMachine } from 'xstate';
import { describe, expect, it } from 'vitest';
import { MachineInspector, type Transition } from '../../runtime/machine-inspector.js';

/*
 * The node's inspector of its machines (runtime/machine-inspector.ts): on while anyone watches,
 * off otherwise, and a machine running before watching started reports from where it was.
 */
const steps = createMachine({
  id: 'steps',
  initial: 'a',
  states: {
    a: { on: { go: 'b' } },
    b: { initial: 'x', states: { x: { on: { go: 'y' } }, y: {} }, on: { end: 'c' } },
    c: { type: 'final' },
  },
});

function setup() {
  let watching = false;
  let asked = 0;
  const seen: Transition[] = [];
  const inspector = new MachineInspector(
    () => (asked++, watching),
    (t) => seen.push(t),
  );
  return {
    inspector,
    seen,
    watch(on: boolean) {
      watching = on;
      inspector.sync();
    },
    asked: () => asked,
  };
}
const brief = (t: Transition) => `${t.from}${t.from_path ? `(${t.from_path})` : ''} -> ${t.to}${t.to_path ? `(${t.to_path})` : ''} on ${t.event}`;

describe('the machine inspector', () => {
  it('reports every step of a machine made while watched, its final state included, with its owner and name', () => {
    const { inspector, seen, watch } = setup();
    watch(true);
    const m = inspector.machine('orchestrator', steps, { id: 'job-1' }).start();
    for (const type of ['go', 'go', 'end']) m.send({ type });
    expect(seen.map(brief)).toEqual(['(start) -> a on xstate.init', 'a -> b(b.x) on go', 'b(b.x) -> b(b.y) on go', 'b(b.y) -> c on end']);
    expect(seen.every((t) => t.actor === 'orchestrator' && t.machine === 'steps' && t.instance === 'job-1')).toBe(true);
    expect(inspector.count()).toBe(0);
  });

  it('asks nothing and builds nothing while nobody watches, and forgets machines as they end', () => {
    const { inspector, seen, asked } = setup();
    const done = inspector.machine('orchestrator', steps).start();
    const stopped = inspector.machine('orchestrator', steps).start();
    expect(inspector.count()).toBe(2);
    const before = asked();
    for (const type of ['go', 'go', 'end']) done.send({ type });
    stopped.send({ type: 'go' });
    // The inspector is not attached: xstate never calls it, so it never asks whether anyone watches.
    expect(asked()).toBe(before);
    stopped.stop();
    expect(seen).toEqual([]);
    expect(inspector.count()).toBe(0);
  });

  it('attaches to a machine already running when watching starts: its next step is from where it was', () => {
    const { inspector, seen, watch } = setup();
    const m = inspector.machine('deployment', steps, { id: 'job-2' }).start();
    m.send({ type: 'go' });
    watch(true);
    m.send({ type: 'go' });
    m.send({ type: 'end' });
    expect(seen.map(brief)).toEqual(['b(b.x) -> b(b.y) on go', 'b(b.y) -> c on end']);
    expect(seen[0]!.instance).toBe('job-2');
  });

  it('detaches from every machine when watching stops, and reports again once it restarts', () => {
    const { inspector, seen, watch, asked } = setup();
    watch(true);
    const m = inspector.machine('deployment', steps).start();
    watch(false);
    const before = asked();
    m.send({ type: 'go' });
    expect(asked()).toBe(before);
    expect(seen.map(brief)).toEqual(['(start) -> a on xstate.init']);
    watch(true);
    m.send({ type: 'go' });
    expect(seen.map(brief).slice(1)).toEqual(['b(b.x) -> b(b.y) on go']);
  });

  it('leaves a failure an observer handles handled, and one nobody handles thrown, as xstate does', async () => {
    const failing = createMachine({ id: 'failing', initial: 'a', states: { a: { on: { boom: { actions: () => { throw new Error('boom'); } } } } } });
    const { inspector } = setup();
    const handled = inspector.machine('deployment', failing).start();
    const caught = new Promise((resolve) => handled.subscribe({ error: resolve }));
    handled.send({ type: 'boom' });
    expect(String(await caught)).toBe('Error: boom');
    // xstate throws a failure nobody observes from a timer: vitest would report it as unhandled,
    // so it is caught here to be looked at.
    const thrown: unknown[] = [];
    const onUncaught = (e: unknown) => thrown.push(e);
    process.prependListener('uncaughtException', onUncaught);
    try {
      inspector.machine('deployment', failing).start().send({ type: 'boom' });
      await new Promise((r) => setTimeout(r, 20));
    } finally {
      process.off('uncaughtException', onUncaught);
    }
    expect(thrown.map(String)).toEqual(['Error: boom']);
    expect(inspector.count()).toBe(0);
  });

  it('attaches to running machines on the next machine made when a watcher came by another way', () => {
    let watching = false;
    const seen: Transition[] = [];
    const inspector = new MachineInspector(
      () => watching,
      (t) => seen.push(t),
    );
    const m = inspector.machine('orchestrator', steps).start();
    watching = true; // a subscriber of the diagnostics channel itself: nobody called sync()
    inspector.machine('orchestrator', steps);
    m.send({ type: 'go' });
    expect(seen.map(brief)).toEqual(['a -> b(b.x) on go']);
  });
});
