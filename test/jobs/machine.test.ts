import { describe, expect, it, vi } from 'vitest';
import { createActor, type EventObject, fromCallback } from 'xstate';
import type { ExecutionHandle } from '../../behaviors/jobs/execution.js';
import { type JobMachineContext, type JobMachineEvent, jobMachine, statusOf, type StopInput } from '../../actors/orchestrator/machine.js';

const handle: ExecutionHandle = { executor: 'null', job_id: 'j', id: 'c-1' };

/** The machine with its effects recorded instead of performed. */
function job(timeoutS?: number) {
  const effects: string[] = [];
  const machine = jobMachine.provide({
    actors: {
      stop: fromCallback<EventObject, StopInput>(({ input }) => void effects.push(`stop(${input.reason})`)),
    },
    actions: {
      start: () => void effects.push('start'),
      persistRunning: ({ context }) => effects.push(`persistRunning(${context.reason})`),
      watch: () => effects.push('watch'),
      finish: ({ context }, { status }) => effects.push(`finish(${status}: ${context.reason})`),
    },
  });
  const actor = createActor(machine, { input: { jobId: 'j', timeoutS } }).start();
  const send = (...events: JobMachineEvent[]) => events.forEach((e) => actor.send(e));
  const state = () => ({ value: actor.getSnapshot().value, status: statusOf(actor.getSnapshot()) });
  const context = (): JobMachineContext => actor.getSnapshot().context;
  return { effects, send, state, context };
}

describe('job machine', () => {
  it('runs pending → starting → running → completed, starting, watching and finishing once each', () => {
    const j = job();
    expect(j.state()).toEqual({ value: { pending: 'queued' }, status: 'pending' });
    j.send({ type: 'reserved' });
    expect(j.state()).toEqual({ value: 'starting', status: 'pending' });
    j.send({ type: 'started', handle });
    expect(j.state()).toEqual({ value: 'running', status: 'running' });
    j.send({ type: 'exited', result: { exit_code: 0, oom_killed: false } });
    expect(j.state()).toEqual({ value: 'completed', status: 'completed' });
    expect(j.effects).toEqual(['start', 'persistRunning(started)', 'watch', 'finish(completed: exited with code 0)']);
    expect(j.context()).toMatchObject({ exitCode: 0, error: null, handle });
  });

  it('fails on a non-zero exit, an OOM kill or a start failure, with the reason', () => {
    const exit3 = job();
    exit3.send({ type: 'reserved' }, { type: 'started', handle }, { type: 'exited', result: { exit_code: 3, oom_killed: false } });
    expect(exit3.state().status).toBe('failed');
    expect(exit3.context()).toMatchObject({ exitCode: 3, error: 'exited with code 3' });

    const oom = job();
    oom.send({ type: 'reserved' }, { type: 'started', handle }, { type: 'exited', result: { exit_code: 137, oom_killed: true } });
    expect(oom.context()).toMatchObject({ exitCode: 137, error: 'killed: out of memory' });

    const unstartable = job();
    unstartable.send({ type: 'reserved' }, { type: 'fault', reason: 'image x is not present' });
    expect(unstartable.state().status).toBe('failed');
    expect(unstartable.effects).toEqual(['start', 'finish(failed: image x is not present)']);
  });

  it('cancels a pending job at once, and a running one by stopping it first', () => {
    const pending = job();
    pending.send({ type: 'cancel', reason: 'cancelled' });
    expect(pending.state().status).toBe('failed');
    expect(pending.effects).toEqual(['finish(failed: cancelled)']);

    const running = job();
    running.send({ type: 'reserved' }, { type: 'started', handle }, { type: 'cancel', reason: 'cancelled' });
    expect(running.state()).toEqual({ value: 'stopping', status: 'running' });
    // However it exits, it exits because it was stopped.
    running.send({ type: 'exited', result: { exit_code: 0, oom_killed: false } });
    expect(running.state().status).toBe('failed');
    expect(running.context()).toMatchObject({ error: 'cancelled', exitCode: 0 });
    expect(running.effects.slice(-2)).toEqual(['stop(cancelled)', 'finish(failed: cancelled)']);
  });

  it('holds a cancel that arrives while starting until the run exists, then stops it', () => {
    const j = job();
    j.send({ type: 'reserved' }, { type: 'cancel', reason: 'cancelled' });
    expect(j.state().value).toBe('starting');
    j.send({ type: 'started', handle });
    expect(j.state().value).toBe('stopping');
    expect(j.effects).toEqual(['start', 'persistRunning(started)', 'watch', 'stop(cancelled)']);
  });

  it('stops a run at its timeout and fails it with the timeout as the reason', () => {
    const j = job();
    j.send({ type: 'reserved' }, { type: 'started', handle }, { type: 'timed_out', after_s: 5 });
    expect(j.state().value).toBe('stopping');
    j.send({ type: 'exited', result: { exit_code: 137, oom_killed: false } });
    expect(j.context()).toMatchObject({ error: 'timed out after 5 s' });
  });

  it('follows a run found again after a restart, and fails one that was lost', () => {
    const found = job();
    found.send({ type: 'reattached', handle });
    expect(found.state().value).toBe('running');
    expect(found.effects).toEqual(['persistRunning(reattached after the node restarted)', 'watch']);

    const lost = job();
    lost.send({ type: 'fault', reason: 'its container no longer exists' });
    expect(lost.state().status).toBe('failed');
    expect(lost.context().error).toBe('its container no longer exists');
  });

  it('ignores events a state does not expect', () => {
    const j = job();
    j.send({ type: 'exited', result: { exit_code: 0, oom_killed: false } }, { type: 'started', handle }, { type: 'timed_out', after_s: 1 });
    expect(j.state().value).toEqual({ pending: 'queued' });
    j.send({ type: 'reserved' }, { type: 'exited', result: { exit_code: 0, oom_killed: false } }, { type: 'reattached', handle });
    expect(j.state().value).toBe('starting');
    expect(j.effects).toEqual(['start']);
  });

  it('stops a run by itself at its timeout, counted from when it started', () => {
    vi.useFakeTimers();
    try {
      const j = job(1);
      j.send({ type: 'reserved' }, { type: 'started', handle });
      vi.advanceTimersByTime(999);
      expect(j.state().value).toBe('running');
      vi.advanceTimersByTime(1);
      expect(j.state().value).toBe('stopping');
      expect(j.context().stopReason).toBe('timed out after 1 s');
      expect(j.effects.at(-1)).toBe('stop(timed out after 1 s)');
    } finally {
      vi.useRealTimers();
    }
  });

  it('keeps the deadline of a run reattached after a restart, rather than starting its timeout again', () => {
    vi.useFakeTimers();
    try {
      const j = job(1);
      j.send({ type: 'reattached', handle, since: Date.now() - 900 });
      vi.advanceTimersByTime(99);
      expect(j.state().value).toBe('running');
      vi.advanceTimersByTime(1);
      expect(j.state().value).toBe('stopping');
      // Without a timeout there is no deadline, and nothing stops the run.
      const untimed = job();
      untimed.send({ type: 'reattached', handle, since: Date.now() - 3_600_000 });
      expect(untimed.context().deadline).toBeNull();
      vi.advanceTimersByTime(3_600_000);
      expect(untimed.state().value).toBe('running');
    } finally {
      vi.useRealTimers();
    }
  });
});
