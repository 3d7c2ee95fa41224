import { createActor, setup, type SnapshotFrom } from 'xstate';

/** starting → running → stopping → stopped; an actor accepts envelopes only while running. */
export const lifecycleMachine = setup({
  types: {
    events: {} as { type: 'started' } | { type: 'stop' } | { type: 'stopped' },
  },
}).createMachine({
  id: 'actor-lifecycle',
  initial: 'starting',
  states: {
    starting: { on: { started: 'running', stop: 'stopping' } },
    running: { on: { stop: 'stopping' } },
    stopping: { on: { stopped: 'stopped' } },
    stopped: { type: 'final' },
  },
});

export type LifecycleState = 'starting' | 'running' | 'stopping' | 'stopped';
export type LifecycleSnapshot = SnapshotFrom<typeof lifecycleMachine>;

export const createLifecycle = () => createActor(lifecycleMachine).start();
