/**
 * The life of one job as an xstate machine. The machine decides which events a job accepts
 * and what each one means; the orchestrator supplies the effects (persist, start, watch,
 * stop, finish) through `provide`, so the rules can be read here in one place and tested
 * without an executor or a database.
 *
 *   pending ──reserved──▶ starting ──started──▶ running ──exited──▶ completed | failed
 *      │                     │                    │  ▲
 *      │                     │ start_failed       │  └─ reattached (from pending, after a restart)
 *      │                     ▼                    ▼ cancel / timed_out
 *      └──cancel / lost──▶ failed ◀──exited─── stopping
 *
 * The stored status follows the tags: `starting` is still pending (nothing runs yet) and
 * `stopping` is still running (the container has not exited yet). Every move between stored
 * statuses is one the job model allows (behaviors/jobs/transitions.ts, which storage enforces);
 * test/jobs/machine-rules.test.ts walks the machine against that table.
 */
import { assign, setup } from 'xstate';
import type { JobStatus } from '../../behaviors/jobs/schema.js';
import { type ExecutionHandle, type ExitResult, outcome } from '../executors/types.js';

export type JobMachineEvent =
  /** The resource manager granted the job's resources: start it. */
  | { type: 'reserved' }
  | { type: 'started'; handle: ExecutionHandle }
  | { type: 'start_failed'; error: string }
  /** Found running (or already exited) by the executor after a restart of the node. */
  | { type: 'reattached'; handle: ExecutionHandle }
  | { type: 'exited'; result: ExitResult }
  | { type: 'timed_out'; after_s: number }
  | { type: 'cancel'; reason: string }
  /** The run can no longer be found or followed. */
  | { type: 'lost'; reason: string };

export interface JobMachineContext {
  jobId: string;
  handle: ExecutionHandle | null;
  /** Why the run is being stopped (cancel, timeout); it becomes the job's error. */
  stopReason: string | null;
  exitCode: number | null;
  error: string | null;
  /** Why the latest stored transition happened: the text of the job's event. */
  reason: string;
}

export const jobMachine = setup({
  types: {
    context: {} as JobMachineContext,
    events: {} as JobMachineEvent,
    input: {} as { jobId: string },
  },
  actions: {
    // Effects, supplied by the orchestrator (see JobRunner).
    start: () => {},
    persistRunning: () => {},
    watch: () => {},
    stop: () => {},
    finish: (_, _params: { status: 'completed' | 'failed' }) => {},
  },
  guards: {
    stopRequested: ({ context }) => context.stopReason !== null,
    succeeded: ({ event }) => event.type === 'exited' && outcome(event.result).status === 'completed',
  },
}).createMachine({
  id: 'job',
  context: ({ input }) => ({ jobId: input.jobId, handle: null, stopReason: null, exitCode: null, error: null, reason: 'submitted' }),
  initial: 'pending',
  states: {
    pending: {
      tags: ['pending'],
      on: {
        reserved: 'starting',
        reattached: {
          target: 'running',
          actions: assign({ handle: ({ event }) => event.handle, reason: 'reattached after the node restarted' }),
        },
        cancel: { target: 'failed', actions: assign(({ event }) => ({ error: event.reason, reason: event.reason })) },
        lost: { target: 'failed', actions: assign(({ event }) => ({ error: event.reason, reason: event.reason })) },
      },
    },
    starting: {
      tags: ['pending'],
      entry: 'start',
      on: {
        started: { target: 'running', actions: assign({ handle: ({ event }) => event.handle, reason: 'started' }) },
        start_failed: { target: 'failed', actions: assign(({ event }) => ({ error: event.error, reason: event.error })) },
        // Nothing to stop yet: noted, and acted on once the run exists.
        cancel: { actions: assign({ stopReason: ({ event }) => event.reason }) },
      },
    },
    running: {
      tags: ['running'],
      entry: ['persistRunning', 'watch'],
      always: { guard: 'stopRequested', target: 'stopping' },
      on: {
        exited: [
          { guard: 'succeeded', target: 'completed', actions: assign(({ event }) => exitedWith(event.result)) },
          { target: 'failed', actions: assign(({ event }) => exitedWith(event.result)) },
        ],
        timed_out: { target: 'stopping', actions: assign({ stopReason: ({ event }) => `timed out after ${event.after_s} s` }) },
        cancel: { target: 'stopping', actions: assign({ stopReason: ({ event }) => event.reason }) },
        lost: { target: 'failed', actions: assign(({ event }) => ({ error: event.reason, reason: event.reason })) },
      },
    },
    stopping: {
      tags: ['running'],
      entry: 'stop',
      on: {
        // However the run ended, it ended because it was stopped: the stop's reason is the error.
        exited: {
          target: 'failed',
          actions: assign(({ context, event }) => ({ exitCode: event.result.exit_code, error: context.stopReason, reason: context.stopReason! })),
        },
        lost: { target: 'failed', actions: assign(({ context }) => ({ error: context.stopReason, reason: context.stopReason! })) },
      },
    },
    completed: { type: 'final', tags: ['completed'], entry: { type: 'finish', params: { status: 'completed' } } },
    failed: { type: 'final', tags: ['failed'], entry: { type: 'finish', params: { status: 'failed' } } },
  },
});

function exitedWith(result: ExitResult): Pick<JobMachineContext, 'exitCode' | 'error' | 'reason'> {
  const { error } = outcome(result);
  return { exitCode: result.exit_code, error, reason: error ?? `exited with code ${result.exit_code}` };
}

/** The stored status a machine state stands for. */
export function statusOf(snapshot: { hasTag(tag: string): boolean }): JobStatus {
  if (snapshot.hasTag('completed')) return 'completed';
  if (snapshot.hasTag('failed')) return 'failed';
  if (snapshot.hasTag('running')) return 'running';
  return 'pending';
}
