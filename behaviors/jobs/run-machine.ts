/**
 * One run on the executor's side, as an xstate machine (id `executor-run`): where the run is,
 * why it was stopped, how it ended. The executor performs the I/O (pull, create, follow, stop)
 * and reports each step as an event; what a run may do next, and what its end means, is decided
 * here, in one place, and every step is a transition the node's inspector sees.
 *
 *   pulling ──pulled──▶ creating ──created──▶ running ──exited──▶ exited
 *   attaching (a run picked up after a restart) ──attached──▶ running
 *   running ──cancel──▶ stopping ──stopped──▶ killed (its result known) | lost (none)
 *   pulling, creating ──failed──▶ failed        attaching, running ──lost──▶ lost
 *
 * A stopped run ends (`killed`) only once the stop is over, container removed included: who
 * waits for the end of a cancelled run learns it when nothing of it is left.
 */
import { type ActorOptions, type AnyActorLogic, assign, createActor, type Actor as MachineActor, setup, waitFor } from 'xstate';
import { DmsError } from '../../runtime/errors.js';
import type { ExitResult } from './execution.js';

/** Where a run starts: fetching what it needs, creating it, or picking it up after a restart. */
export type RunPhase = 'pulling' | 'creating' | 'attaching';

export type RunEvent =
  | { type: 'pulled' }
  /** The run exists and runs; `id` is the executor's id for it. */
  | { type: 'created'; id: string }
  | { type: 'attached' }
  | { type: 'failed'; error: string }
  | { type: 'exited'; result: ExitResult }
  | { type: 'cancel'; reason: string }
  /** The stop is over: the run no longer exists. */
  | { type: 'stopped' }
  | { type: 'lost'; reason: string };

export interface RunContext {
  jobId: string;
  /** Where it started. */
  phase: RunPhase;
  id: string | null;
  /** Why the run is being stopped; its result says so. */
  cancelReason: string | null;
  result: ExitResult | null;
  /** Why the run could not start, or can no longer be followed. */
  error: string | null;
}

const runSetup = setup({
  types: {
    context: {} as RunContext,
    events: {} as RunEvent,
    input: {} as { jobId: string; id?: string },
  },
  actions: {
    /** Why it could not start, or can no longer be followed. */
    noteError: assign({ error: ({ event }) => (event.type === 'failed' ? event.error : event.type === 'lost' ? event.reason : null) }),
  },
  guards: {
    hasResult: ({ context }) => context.result !== null,
  },
});

/** The machine of a run that starts in `phase`: one per phase, made once, so making a run's machine resolves nothing. */
function machineFrom(phase: RunPhase) {
  return runSetup.createMachine({
    id: 'executor-run',
    context: ({ input }) => ({ jobId: input.jobId, phase, id: input.id ?? null, cancelReason: null, result: null, error: null }),
    initial: phase,
    states: {
      pulling: {
        on: {
          pulled: 'creating',
          failed: { target: 'failed', actions: 'noteError' },
        },
      },
      creating: {
        on: {
          created: { target: 'running', actions: assign({ id: ({ event }) => event.id }) },
          failed: { target: 'failed', actions: 'noteError' },
        },
      },
      attaching: {
        on: {
          attached: 'running',
          lost: { target: 'lost', actions: 'noteError' },
        },
      },
      running: {
        on: {
          exited: { target: 'exited', actions: assign({ result: ({ event }) => event.result }) },
          cancel: { target: 'stopping', actions: assign({ cancelReason: ({ event }) => event.reason }) },
          lost: { target: 'lost', actions: 'noteError' },
        },
      },
      stopping: {
        on: {
          // Noted; the run ends once the stop is over.
          exited: { actions: assign({ result: ({ event }) => event.result }) },
          lost: { actions: 'noteError' },
          stopped: [{ guard: 'hasResult', target: 'killed' }, { target: 'lost' }],
        },
      },
      exited: { type: 'final' },
      killed: { type: 'final' },
      lost: { type: 'final' },
      failed: { type: 'final' },
    },
  });
}

const runMachines = {
  pulling: machineFrom('pulling'),
  creating: machineFrom('creating'),
  attaching: machineFrom('attaching'),
} satisfies Record<RunPhase, unknown>;
type RunMachineLogic = (typeof runMachines)[RunPhase];

export type RunMachine = MachineActor<RunMachineLogic>;

/** What makes a machine: the executor actor's `ctx.machine` (observed), or plain xstate. */
export type MachineFactory = <L extends AnyActorLogic>(logic: L, options?: ActorOptions<L>) => MachineActor<L>;
export const plainMachines: MachineFactory = (logic, options) => createActor(logic, options);

/** Makes and starts a run's machine. */
export function newRun(make: MachineFactory, jobId: string, phase: RunPhase, id?: string): RunMachine {
  return make(runMachines[phase], { id: jobId, input: { jobId, id } }).start();
}

/** The run's result once it has ended; rejects with the reason when it ended without one. */
export async function endOf(run: RunMachine): Promise<ExitResult> {
  const s = await waitFor(run, (snap) => snap.status === 'done');
  if (s.context.result && (s.value === 'exited' || s.value === 'killed')) return s.context.result;
  throw new DmsError('unavailable', s.context.error ?? 'the run ended without a result');
}

/** Resolves once the run's result (or the reason there is none) is known, which for a stopped run comes before its end. */
export async function outcomeKnown(run: RunMachine): Promise<void> {
  await waitFor(run, (snap) => snap.status === 'done' || snap.context.result !== null || snap.context.error !== null);
}
