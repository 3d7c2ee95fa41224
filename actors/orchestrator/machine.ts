/**
 * The life of one job as an xstate machine. The machine decides which events a job accepts
 * and what each one means; the orchestrator supplies the effects through `provide`, so the
 * rules can be read here in one place and tested without an executor or a database:
 *
 *  - `start` and `stop` are invoked actors: each asks the job's executor (an envelope). The stop
 *    sends back what came of it (`exited` / `lost`); how the start went is reported by the
 *    executor (/dms/job/started), which the orchestrator hands to the machine as `started` or
 *    `start_failed`. Leaving the state stops them, so a late answer is not taken for a new event.
 *  - the run's end arrives as an event: `watch` asks the executor to report it (/dms/job/exited),
 *    and the orchestrator hands the report to the machine as `exited` or `lost`.
 *  - the timeout is a delay of the running state, computed from the deadline in the context:
 *    the deadline is set once, when the run starts, so a run picked up after a restart keeps
 *    the deadline it had.
 *  - `persistRunning` and `finish` are actions: they write to the journal.
 *
 *   pending ──reserved / placed──▶ starting ──started──▶ running ──exited──▶ completed | failed
 *      │  ▲                          │                    │  ▲
 *      │  └── start_failed / lost, placed on another node with placements left (replace)
 *      │                             │ start_failed       │  └─ reattached (from pending, after a restart)
 *      │                             ▼                    ▼ cancel / timeout
 *      └──cancel / lost──────────▶ failed ◀──exited─── stopping
 *
 * `reserved`: this node's resource manager granted the job's share. `placed`: another node
 * holds it (a lease, see actors/deployment/); the start and everything after go to that node
 * through the remote executor, and a run lost there sends the job back to pending.
 *
 * The stored status follows the tags: `starting` is still pending (nothing runs yet) and
 * `stopping` is still running (the container has not exited yet). Every move between stored
 * statuses is one the job model allows (behaviors/jobs/transitions.ts, which storage enforces);
 * test/jobs/machine-rules.test.ts walks the machine against that table.
 */
import { assign, type EventObject, fromCallback, raise, setup } from 'xstate';
import type { JobStatus } from '../../behaviors/jobs/schema.js';
import { type ExecutionHandle, type ExitResult, outcome } from '../../behaviors/jobs/execution.js';

export type JobMachineEvent =
  /** The resource manager granted the job's resources: start it. */
  | { type: 'reserved' }
  /** Another node reserved the job's resources (a lease): start it there. */
  | { type: 'placed'; node: string }
  | { type: 'started'; handle: ExecutionHandle }
  | { type: 'start_failed'; error: string }
  /**
   * Found running (or already exited) by the executor after a restart of the node; `since`:
   * when it began running (ms since the epoch), which its timeout counts from.
   */
  | { type: 'reattached'; handle: ExecutionHandle; since?: number; node?: string }
  | { type: 'exited'; result: ExitResult }
  /** The run's deadline passed (raised by the machine's own timer). */
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
  /** The job's timeout_s, if it has one. */
  timeoutS: number | null;
  /** When the timeout stops the run (ms since the epoch); set once, as the run starts. */
  deadline: number | null;
  /** The other node running it, while placed on one; null while here or not yet placed. */
  node: string | null;
  /** Placements on other nodes used so far, and how many the job may use. */
  placements: number;
  maxAttempts: number;
  /** Why its run was lost while being stopped (a provider that ignored the cancel): the attempt's outcome. */
  lost?: string;
}

export interface JobMachineInput {
  jobId: string;
  timeoutS?: number | null;
  /** `placement.max_attempts` (default 3). */
  maxAttempts?: number;
  /** Placements it already used (a job picked up after a restart). */
  placements?: number;
}

/** What the invoked effects are given. */
export type StartInput = { jobId: string };
export type StopInput = { jobId: string; handle: ExecutionHandle; reason: string };

/** The longest delay a timer takes (2^31 - 1 ms, about 24.8 days); a longer one is chained by timeoutClock. */
const MAX_TIMER_MS = 2_147_483_647;

/**
 * The clock of the job machines' timers (their timeouts): a pending timeout does not keep the
 * process up, and one longer than a timer takes (24.8 days) is chained rather than cut short.
 */
export const timeoutClock = {
  setTimeout(fn: (...args: unknown[]) => void, ms: number): { timer?: NodeJS.Timeout } {
    const handle: { timer?: NodeJS.Timeout } = {};
    const arm = (left: number) => {
      handle.timer = setTimeout(() => (left > MAX_TIMER_MS ? arm(left - MAX_TIMER_MS) : fn()), Math.min(left, MAX_TIMER_MS));
      handle.timer.unref();
    };
    arm(ms);
    return handle;
  },
  clearTimeout(handle: { timer?: NodeJS.Timeout }): void {
    clearTimeout(handle.timer);
  },
};

const deadlineFrom = (context: JobMachineContext, since: number): number | null =>
  context.deadline ?? (context.timeoutS ? since + context.timeoutS * 1000 : null);

export const jobMachine = setup({
  types: {
    context: {} as JobMachineContext,
    events: {} as JobMachineEvent,
    input: {} as JobMachineInput,
  },
  actors: {
    // Effects, supplied by the orchestrator: these stand-ins do nothing.
    /** Asks for the run to be started; sends back `start_failed` if it cannot even ask. */
    start: fromCallback<EventObject, StartInput>(() => {}),
    /** Stops the run; sends back `exited` or `lost` once it is stopped. */
    stop: fromCallback<EventObject, StopInput>(() => {}),
  },
  actions: {
    // Effects, supplied by the orchestrator.
    persistRunning: () => {},
    /** Asks the executor to report the run's end. */
    watch: () => {},
    finish: (_, _params: { status: 'completed' | 'failed' }) => {},
    /** The node running it was lost or refused to start it: the job waits to be placed again. */
    replace: (_, _params: { node: string; reason: string; outcome: 'lost' | 'refused' }) => {},
    /** The node it was placed on refused to start it, and no placement is left: the attempt is recorded. */
    noteRefused: (_, _params: { node: string; reason: string }) => {},
  },
  delays: {
    // Without a deadline the timer is never due: the guard below turns it away.
    untilDeadline: ({ context }) => (context.deadline === null ? MAX_TIMER_MS : Math.max(0, context.deadline - Date.now())),
  },
  guards: {
    stopRequested: ({ context }) => context.stopReason !== null,
    succeeded: ({ event }) => event.type === 'exited' && outcome(event.result).status === 'completed',
    hasDeadline: ({ context }) => context.deadline !== null,
    /** Placed on another node, and placements are left: try elsewhere rather than fail. */
    mayReplace: ({ context }) => context.node !== null && context.placements < context.maxAttempts,
    placedElsewhere: ({ context }) => context.node !== null,
  },
}).createMachine({
  id: 'job',
  context: ({ input }) => ({
    jobId: input.jobId,
    handle: null,
    stopReason: null,
    exitCode: null,
    error: null,
    reason: 'submitted',
    timeoutS: input.timeoutS ?? null,
    deadline: null,
    node: null,
    placements: input.placements ?? 0,
    maxAttempts: input.maxAttempts ?? 3,
  }),
  initial: 'pending',
  states: {
    pending: {
      tags: ['pending'],
      on: {
        reserved: 'starting',
        placed: { target: 'starting', actions: assign({ node: ({ event }) => event.node, placements: ({ context }) => context.placements + 1 }) },
        reattached: {
          target: 'running',
          actions: assign({
            node: ({ event }) => event.node ?? null,
            handle: ({ event }) => event.handle,
            reason: 'reattached after the node restarted',
            deadline: ({ context, event }) => deadlineFrom(context, event.since ?? Date.now()),
          }),
        },
        cancel: { target: 'failed', actions: assign(({ event }) => ({ error: event.reason, reason: event.reason })) },
        lost: { target: 'failed', actions: assign(({ event }) => ({ error: event.reason, reason: event.reason })) },
      },
    },
    starting: {
      tags: ['pending'],
      invoke: { src: 'start', input: ({ context }) => ({ jobId: context.jobId }) },
      on: {
        started: {
          target: 'running',
          actions: assign({ handle: ({ event }) => event.handle, reason: 'started', deadline: ({ context }) => deadlineFrom(context, Date.now()) }),
        },
        start_failed: [
          {
            guard: 'mayReplace',
            target: 'pending',
            actions: [
              { type: 'replace', params: ({ context, event }) => ({ node: context.node!, reason: `node ${context.node} could not start it: ${event.error}`, outcome: 'refused' as const }) },
              assign({ node: null, handle: null }),
            ],
          },
          // Its last placement refused: recorded as an attempt, and the error names the node.
          {
            guard: 'placedElsewhere',
            target: 'failed',
            actions: [
              { type: 'noteRefused', params: ({ context, event }) => ({ node: context.node!, reason: `node ${context.node} could not start it: ${event.error}` }) },
              assign(({ context, event }) => ({ error: `node ${context.node} could not start it: ${event.error}`, reason: `node ${context.node} could not start it: ${event.error}` })),
            ],
          },
          { target: 'failed', actions: assign(({ event }) => ({ error: event.error, reason: event.error })) },
        ],
        // Nothing to stop yet: noted, and acted on once the run exists.
        cancel: { actions: assign({ stopReason: ({ event }) => event.reason }) },
      },
    },
    running: {
      tags: ['running'],
      entry: ['persistRunning', 'watch'],
      always: { guard: 'stopRequested', target: 'stopping' },
      // The deadline passing is the run timing out: one rule for both.
      after: { untilDeadline: { guard: 'hasDeadline', actions: raise(({ context }) => ({ type: 'timed_out', after_s: context.timeoutS! })) } },
      on: {
        exited: [
          { guard: 'succeeded', target: 'completed', actions: assign(({ event }) => exitedWith(event.result)) },
          { target: 'failed', actions: assign(({ event }) => exitedWith(event.result)) },
        ],
        timed_out: { target: 'stopping', actions: assign({ stopReason: ({ event }) => `timed out after ${event.after_s} s` }) },
        cancel: { target: 'stopping', actions: assign({ stopReason: ({ event }) => event.reason }) },
        lost: [
          {
            guard: 'mayReplace',
            target: 'pending',
            actions: [
              { type: 'replace', params: ({ context, event }) => ({ node: context.node!, reason: event.reason, outcome: 'lost' as const }) },
              assign({ node: null, handle: null, deadline: null }),
            ],
          },
          { target: 'failed', actions: assign(({ event }) => ({ error: event.reason, reason: event.reason })) },
        ],
      },
    },
    stopping: {
      tags: ['running'],
      invoke: { src: 'stop', input: ({ context }) => ({ jobId: context.jobId, handle: context.handle!, reason: context.stopReason! }) },
      on: {
        // However the run ended, it ended because it was stopped: the stop's reason is the error.
        exited: {
          target: 'failed',
          actions: assign(({ context, event }) => ({ exitCode: event.result.exit_code, error: context.stopReason, reason: context.stopReason! })),
        },
        // Stopped, but not seen to stop: the stop's reason and what went wrong.
        lost: {
          target: 'failed',
          actions: assign(({ context, event }) => {
            const why = event.reason === context.stopReason ? context.stopReason! : `${context.stopReason}; ${event.reason}`;
            return { error: why, reason: why, ...(event.reason === context.stopReason ? {} : { lost: event.reason }) };
          }),
        },
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
