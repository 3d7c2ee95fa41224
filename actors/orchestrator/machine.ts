/**
 * The life of one job as an xstate machine, placement included. The machine decides which
 * events a job accepts, where it goes to be placed and what each answer means; the
 * orchestrator supplies the effects through `provide`, so the rules can be read here in one
 * place and tested without an executor, a network or a database (test/jobs/placement-chart.test.ts
 * drives one through every placement state on a simulated clock):
 *
 *   pending ┬ queued ──refused here, may leave, offer due──▶ offering ──placed elsewhere──▶ starting
 *           │  │ ▲ ▲                                            │   │
 *           │  │ │ └──────won here (this node's own bid)─────────┘   │ nobody took it
 *           │  │ └──resources_freed───────────┐                      ▼
 *           │  └──refused here, offered lately──────────────────▶ unplaced ──backoff over / peer_joined──▶ offering
 *           │ queued (refused here with no peer) ──peer_joined──▶ offering
 *           │ queued ──reserved──▶ starting
 *           │ held (a part of an ensemble) ──assigned (its share reserved by the ensemble)──▶ starting
 *           └ recovering (picked up after a restart: waits for what recovery found of its run)
 *               └──ask_again (placed on a node whose answer to its start never came)──▶ starting
 *
 *   starting ──started──▶ running ──exited──▶ completed | failed
 *      │  ▲                 │  ▲
 *      │  └─ fault, placed on another node with placements left ─▶ pending (that node avoided while another bids)
 *      │ fault              │  └─ reattached (from pending, after a restart)
 *      ▼                    ▼ cancel / timeout
 *   failed ◀──exited / fault── stopping          pending ──cancel / fault──▶ failed
 *
 *  - where a new job goes first is its `route`: `here` (it runs on this node whatever happens),
 *    `here-first` (this node's resource manager first, the network when refused here), or
 *    `network` (its placement names another node, a location or labels: only bids decide).
 *  - `queued`: in this node's scheduler (entry/exit: `enqueue`/`dequeue`), which answers
 *    `reserved` or `refused`. `offering`: the invoked `place` asks the deployment actor for bids
 *    and a reservation; leaving the state (a cancel) lets go of whatever it reserves. `unplaced`:
 *    nobody took it; each fruitless offer doubles the wait before the next (`backoff` in the
 *    context, up to its bound), so a full network is not flooded with offers it cannot take.
 *  - `start` is the entry action of `starting`: it asks the job's executor (an envelope) and
 *    returns. How the start went is reported by the executor, which the orchestrator hands to
 *    the machine as `started` or `fault` (a start that could not even be asked is a `fault`
 *    too); a job whose placement started it with its reserve (`placedStart`) is not started
 *    again: the start passes on what the provider said. `starting` is left only by those two
 *    answers, so nothing of a start outlives the state. (It was an invoked actor: a child
 *    actor made and stopped per job was a fifth of a null job's machine time.) `stop` is an
 *    invoked actor, which answers with the run's end. The run's end arrives as `exited`, or
 *    `fault` when the executor can no longer follow it. One `fault` event serves every state:
 *    what it means is the state's.
 *  - the timeout is a delay of the running state, computed from the deadline in the context:
 *    the deadline is set once, when the run starts, so a run picked up after a restart keeps
 *    the deadline it had.
 *  - `persistRunning`, `placedOn`, `replace` and `finish` write to the journal.
 *
 * The stored status follows the tags: `starting` is still pending (nothing runs yet) and
 * `stopping` is still running (the container has not exited yet). Every move between stored
 * statuses is one the job model allows (behaviors/jobs/transitions.ts, which storage enforces);
 * test/jobs/machine-rules.test.ts walks the machine against that table.
 */
import { assign, type EventObject, fromCallback, fromPromise, raise, setup } from 'xstate';
import { type StartOutcome, startOutcomeOf } from '../../behaviors/jobs/deployment.js';
import type { JobStatus } from '../../behaviors/jobs/schema.js';
import { errorText } from '../../runtime/errors.js';
import { type ExecutionHandle, type ExitResult, outcome } from '../../behaviors/jobs/execution.js';

export type JobMachineEvent =
  /** This node's resource manager granted the job's resources: start it here. */
  | { type: 'reserved' }
  /** This node's resource manager cannot hold it now; `peers`: how many peers the node has now. */
  | { type: 'refused'; reason: string; peers: number }
  /** Resources were freed here: a job waiting for a node asks here again. */
  | { type: 'resources_freed' }
  /** A peer connected: a job waiting for a node is offered again now. */
  | { type: 'peer_joined' }
  /**
   * A part of an ensemble was given its node by the ensemble, which reserved its share there
   * (`here`: this node's resource manager holds it under the job's id).
   */
  | { type: 'assigned'; node: string; here: boolean }
  | { type: 'started'; handle: ExecutionHandle }
  /**
   * Found running (or already exited) by the executor after a restart of the node; `since`:
   * when it began running (ms since the epoch), which its timeout counts from.
   */
  | { type: 'reattached'; handle: ExecutionHandle; since?: number; node?: string }
  /**
   * Placed on `node` and asked to start there before the node restarted, with no answer stored:
   * the provider may run it, so its start is asked again there (answered with the run it began).
   */
  | { type: 'ask_again'; node: string }
  | { type: 'exited'; result: ExitResult }
  /** The run's deadline passed (raised by the machine's own timer). */
  | { type: 'timed_out'; after_s: number }
  | { type: 'cancel'; reason: string }
  /** The run could not be started, or can no longer be followed: what that means is the state's. */
  | { type: 'fault'; reason: string };

/** Where a job goes to be placed (see the chart above); `ensemble`: its ensemble places it (actors/ensembles). */
export type Route = 'here' | 'here-first' | 'network' | 'ensemble';

/**
 * What the invoked `place` answers: the node that reserved it, or why nobody did. A reserve that
 * carried the job's start says how that went (StartOutcome): the `start` that follows then only
 * passes it on.
 */
export type PlaceOutcome = ({ node: string; here: boolean } & StartOutcome) | { waiting: string; only_avoided?: true };

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
  /** What that node said of the start its reserve carried; null when it was not asked to start it yet. */
  placedStart: StartOutcome | null;
  /** Placements on other nodes used so far, and how many the job may use. */
  placements: number;
  maxAttempts: number;
  /** Why its run was lost while being stopped (a provider that ignored the cancel): the attempt's outcome. */
  lost?: string;
  route: Route;
  /** The one node the job may run on, when pinned to another: never excluded, it is waited for. */
  pinned: string | null;
  /** Nodes that lost or refused it: not asked again. */
  exclude: string[];
  /** The wait before the next offer once nobody took it, and when that is (ms since the epoch; 0: now). */
  backoffMs: number;
  nextOfferAt: number;
  backoff: { firstMs: number; maxMs: number };
  /** Picked up after a restart: waits in `recovering` for what recovery found of its run. */
  recovering: boolean;
  /**
   * Refused by this node's resource manager since it was last queued: a peer joining may take
   * it. Cleared by the transitions that bring a job back to `queued` (not on entering it: an
   * entry assign cost a new job a quarter of its machine's time).
   */
  refusedHere: boolean;
}

export interface JobMachineInput {
  jobId: string;
  timeoutS?: number | null;
  /** `placement.max_attempts` (default 3). */
  maxAttempts?: number;
  /** Placements it already used (a job picked up after a restart). */
  placements?: number;
  /** Default `here`: a node without a network places nothing elsewhere. */
  route?: Route;
  pinned?: string | null;
  /** `deployment.offer_retry_ms` and `deployment.max_offer_backoff_ms`. */
  backoff?: { firstMs: number; maxMs: number };
  recovering?: boolean;
}

/** What the invoked effects are given. */
export type StopInput = { jobId: string; handle: ExecutionHandle; reason: string };
export type PlaceInput = { jobId: string; exclude: readonly string[] };

/** The offer back-off without configuration (`deployment.offer_retry_ms`, `deployment.max_offer_backoff_ms`): a node that grows its share gets a waiting job within the bound. */
export const DEFAULT_OFFER_BACKOFF = { firstMs: 1_000, maxMs: 8_000 };

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

const nodeOf = (output: PlaceOutcome): string => ('node' in output ? output.node : '');
const startOf = (output: PlaceOutcome): StartOutcome | null => ('node' in output ? startOutcomeOf(output) : null);
/** Why an offer placed the job nowhere ('' when it placed it). */
const waitingOf = (output: PlaceOutcome): string => ('waiting' in output ? output.waiting : '');

const refusedBy = (context: JobMachineContext, reason: string) => `node ${context.node} could not start it: ${reason}`;

export const jobMachine = setup({
  types: {
    context: {} as JobMachineContext,
    events: {} as JobMachineEvent,
    input: {} as JobMachineInput,
  },
  actors: {
    // Effects, supplied by the orchestrator: these stand-ins do nothing.
    /** Stops the run; sends back `exited` or `fault` once it is stopped. */
    stop: fromCallback<EventObject, StopInput>(() => {}),
    /** Asks the network for bids and a reservation; stopped early (a cancel), it lets go of what it reserved. */
    place: fromPromise<PlaceOutcome, PlaceInput>(() => new Promise<PlaceOutcome>(() => {})),
  },
  actions: {
    // Effects, supplied by the orchestrator.
    /** Asks the executor to start the run; `started` or `fault` comes back (a `fault` too when it cannot even ask). */
    start: () => {},
    /** Into this node's scheduler, which answers `reserved` or `refused`; and out of it. */
    enqueue: () => {},
    dequeue: () => {},
    /** The job keeps waiting, and says what for. */
    noteWaiting: (_, _params: { reason: string }) => {},
    /** Another node reserved it: recorded, then started there. */
    placedOn: (_, _params: { node: string }) => {},
    /** A share reserved here that nobody waits for any more goes back. */
    giveBack: () => {},
    persistRunning: () => {},
    /** Asks the executor to report the run's end. */
    watch: () => {},
    finish: (_, _params: { status: 'completed' | 'failed' }) => {},
    /** The node running it was lost or refused to start it: the job waits to be placed again. */
    replace: (_, _params: { node: string; reason: string; outcome: 'lost' | 'refused' }) => {},
    /** The node it was placed on refused to start it, and no placement is left: the attempt is recorded. */
    noteRefused: (_, _params: { node: string; reason: string }) => {},
    /** The job fails, and says why. */
    failBecause: assign((_, { why }: { why: string }) => ({ error: why, reason: why })),
    /** Back to this node's queue: refused here since it was last queued is what counts. */
    clearRefused: assign({ refusedHere: false }),
    /** Offered and nobody took it: the wait before the next offer doubles, up to its bound. */
    backOff: assign(({ context }) => {
      const backoffMs = Math.min(context.backoff.maxMs, context.backoffMs * 2 || context.backoff.firstMs);
      return { backoffMs, nextOfferAt: Date.now() + backoffMs };
    }),
    /** Back to pending from another node: that node is not asked again, unless it is the one the job may run on. */
    forget: assign(({ context }) => ({
      refusedHere: false,
      exclude: context.node === null || context.node === context.pinned || context.exclude.includes(context.node) ? context.exclude : [...context.exclude, context.node],
      node: null,
      placedStart: null,
      handle: null,
      deadline: null,
      recovering: false,
    })),
  },
  delays: {
    // Without a deadline the timer is never due: the guard below turns it away.
    untilDeadline: ({ context }) => (context.deadline === null ? MAX_TIMER_MS : Math.max(0, context.deadline - Date.now())),
    untilNextOffer: ({ context }) => Math.max(0, context.nextOfferAt - Date.now()),
  },
  guards: {
    stopRequested: ({ context }) => context.stopReason !== null,
    succeeded: ({ event }) => event.type === 'exited' && outcome(event.result).status === 'completed',
    hasDeadline: ({ context }) => context.deadline !== null,
    /** Placed on another node, and placements are left: try elsewhere rather than fail. */
    mayReplace: ({ context }) => context.node !== null && context.placements < context.maxAttempts,
    placedElsewhere: ({ context }) => context.node !== null,
    recovering: ({ context }) => context.recovering,
    toNetwork: ({ context }) => context.route === 'network',
    /** Refused here; the network may take it, and its next offer is due. */
    mayOffer: ({ context, event }) => context.route !== 'here' && event.type === 'refused' && event.peers > 0 && Date.now() >= context.nextOfferAt,
    /** Refused here and offered lately: it waits its turn for the network. */
    offerNotDue: ({ context, event }) => context.route !== 'here' && event.type === 'refused' && event.peers > 0,
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
    placedStart: null,
    placements: input.placements ?? 0,
    maxAttempts: input.maxAttempts ?? 3,
    route: input.route ?? 'here',
    pinned: input.pinned ?? null,
    exclude: [],
    backoffMs: 0,
    nextOfferAt: 0,
    backoff: input.backoff ?? DEFAULT_OFFER_BACKOFF,
    recovering: input.recovering ?? false,
    refusedHere: false,
  }),
  initial: 'pending',
  states: {
    pending: {
      tags: ['pending'],
      initial: 'routing',
      states: {
        // Transient: where a job goes first (never a state the job is seen in).
        routing: {
          always: [
            { guard: 'recovering', target: 'recovering' },
            { guard: ({ context }) => context.route === 'ensemble', target: 'held' },
            { guard: 'toNetwork', target: 'offering' },
            { target: 'queued' },
          ],
        },
        // A part of an ensemble: the ensemble places every part together, all or nothing
        // (actors/ensembles), and says where each goes once every share is reserved.
        held: {
          tags: ['held'],
          on: {
            assigned: [
              { guard: ({ event }) => event.here, target: '#job.starting' },
              {
                target: '#job.starting',
                actions: [
                  assign(({ context, event }) => ({ node: event.node, placements: context.placements + 1 })),
                  { type: 'placedOn', params: ({ event }) => ({ node: event.node }) },
                ],
              },
            ],
          },
        },
        recovering: {
          on: { ask_again: { target: '#job.starting', actions: assign(({ event }) => ({ node: event.node, recovering: false })) } },
        },
        queued: {
          entry: 'enqueue',
          exit: 'dequeue',
          on: {
            reserved: '#job.starting',
            refused: [
              { guard: 'mayOffer', target: 'offering' },
              { guard: 'offerNotDue', target: 'unplaced' },
              {
                actions: [assign({ refusedHere: true }), { type: 'noteWaiting', params: ({ event }) => ({ reason: `waiting for resources: ${event.reason}` }) }],
              },
            ],
            // Refused here when it had nobody to go to: the new peer may take it.
            peer_joined: { guard: ({ context }) => context.refusedHere && context.route !== 'here', target: 'offering', actions: assign({ nextOfferAt: 0 }) },
          },
        },
        offering: {
          invoke: {
            src: 'place',
            input: ({ context }) => ({ jobId: context.jobId, exclude: context.exclude }),
            onDone: [
              // This node's own bid won: its scheduler reserves (and, finding it short after all, it is offered again).
              { guard: ({ event }) => 'node' in event.output && event.output.here, target: 'queued', actions: 'clearRefused' },
              {
                guard: ({ event }) => 'node' in event.output,
                target: '#job.starting',
                actions: [
                  assign(({ context, event }) => ({ node: nodeOf(event.output), placedStart: startOf(event.output), placements: context.placements + 1, backoffMs: 0, nextOfferAt: 0 })),
                  { type: 'placedOn', params: ({ event }) => ({ node: nodeOf(event.output) }) },
                ],
              },
              // Only the nodes that failed it bid: they are asked again at its next offer, its
              // placements bounding how often; avoided for good, it waited for a node that never came.
              {
                guard: ({ event }) => 'only_avoided' in event.output && event.output.only_avoided === true,
                target: 'unplaced',
                actions: [
                  'backOff',
                  assign({ exclude: [] }),
                  { type: 'noteWaiting', params: ({ event }) => ({ reason: `waiting for a node: ${waitingOf(event.output)}; no other node bid, so those are asked again at its next offer` }) },
                ],
              },
              {
                target: 'unplaced',
                actions: ['backOff', { type: 'noteWaiting', params: ({ event }) => ({ reason: `waiting for a node: ${waitingOf(event.output)}` }) }],
              },
            ],
            onError: {
              target: 'unplaced',
              actions: ['backOff', { type: 'noteWaiting', params: ({ event }) => ({ reason: `waiting for a node: placement failed: ${errorText(event.error)}` }) }],
            },
          },
        },
        unplaced: {
          tags: ['unplaced'],
          after: { untilNextOffer: 'offering' },
          on: {
            // Room here says nothing about a job that must run elsewhere: it waits for its next offer.
            resources_freed: { guard: ({ context }) => context.route !== 'network', target: 'queued', actions: 'clearRefused' },
            peer_joined: { target: 'offering', actions: assign({ nextOfferAt: 0 }) },
          },
        },
      },
      on: {
        // Only a queued job is in the scheduler; a grant that finds it elsewhere is given back.
        reserved: { actions: 'giveBack' },
        reattached: {
          target: 'running',
          actions: assign({
            node: ({ event }) => event.node ?? null,
            handle: ({ event }) => event.handle,
            reason: 'reattached after the node restarted',
            deadline: ({ context, event }) => deadlineFrom(context, event.since ?? Date.now()),
          }),
        },
        cancel: { target: 'failed', actions: { type: 'failBecause', params: ({ event }) => ({ why: event.reason }) } },
        fault: { target: 'failed', actions: { type: 'failBecause', params: ({ event }) => ({ why: event.reason }) } },
      },
    },
    starting: {
      tags: ['pending'],
      entry: 'start',
      on: {
        started: {
          target: 'running',
          actions: assign({ handle: ({ event }) => event.handle, reason: 'started', deadline: ({ context }) => deadlineFrom(context, Date.now()) }),
        },
        fault: [
          {
            guard: 'mayReplace',
            target: 'pending',
            actions: [
              { type: 'replace', params: ({ context, event }) => ({ node: context.node!, reason: refusedBy(context, event.reason), outcome: 'refused' as const }) },
              'forget',
            ],
          },
          // Its last placement refused: recorded as an attempt, and the error names the node.
          {
            guard: 'placedElsewhere',
            target: 'failed',
            actions: [{ type: 'noteRefused', params: ({ context, event }) => ({ node: context.node!, reason: refusedBy(context, event.reason) }) }, { type: 'failBecause', params: ({ context, event }) => ({ why: refusedBy(context, event.reason) }) }],
          },
          { target: 'failed', actions: { type: 'failBecause', params: ({ event }) => ({ why: event.reason }) } },
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
        fault: [
          {
            guard: 'mayReplace',
            target: 'pending',
            actions: [{ type: 'replace', params: ({ context, event }) => ({ node: context.node!, reason: event.reason, outcome: 'lost' as const }) }, 'forget'],
          },
          { target: 'failed', actions: { type: 'failBecause', params: ({ event }) => ({ why: event.reason }) } },
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
        fault: {
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
