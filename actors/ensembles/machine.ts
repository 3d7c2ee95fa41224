/**
 * The life of one ensemble as an xstate machine (machine `ensemble`, instance its id, on the
 * node's stream like every other machine). Its parts are jobs, each with its own job machine
 * in the orchestrator; this machine holds how each part stands (`parts` in the context, kept
 * up to date by the `part` events the orchestrator sends) and decides what the ensemble does
 * about it. The effects are supplied by the ensemble actor (./actor.ts) through `provide`:
 *
 *   placing ──every part waiting reserved (all or nothing)──▶ active
 *     │ a part could not be reserved: every lease of the round let go
 *     ▼
 *   waiting ──back-off (1 s, doubling to 8 s)──▶ placing
 *
 *   active ──before it ran: a part back to pending (its start refused, or its node lost)──▶
 *            every other part holding a node stopped and given a new job ──▶ placing (all of them)
 *   active ──once it ran: a part back to pending (its node lost, or its start refused)──▶ placing (that part)
 *   active ──every task completed──▶ stopping (services stopped) ──all ended──▶ completed
 *   active ──a part that is not optional failed, no restart left──▶ stopping ──▶ failed
 *   active ──a part failed, restarts left (restart.on: failure)──▶ active (a new job for it)
 *   any ──cancel──▶ stopping ──▶ failed
 *
 * The ensemble is `pending` until every part has run at once, then `running` until it ends.
 */
import { assign, enqueueActions, fromPromise, setup } from 'xstate';
import type { PartChanged } from '../../behaviors/ensembles/schema.js';
import { errorText } from '../../runtime/errors.js';

export interface PartCtx {
  part: string;
  kind: 'task' | 'service';
  optional: boolean;
  restartOn: 'failure' | 'never';
  maxRestarts: number;
  restarts: number;
  /** Its current job; null while a new one is being made for a restart. */
  jobId: string | null;
  status: 'pending' | 'running' | 'completed' | 'failed';
  /** Where it runs, or was reserved; null while it waits for a node. */
  node: string | null;
  /** Assigned a node this round and not yet heard running or back: not placed again meanwhile. */
  assigned: boolean;
  ports: number[];
  exclude: string[];
  error: string | null;
}

export interface EnsembleContext {
  id: string;
  parts: Record<string, PartCtx>;
  /** Whole rounds of placement that found no room, for the back-off. */
  backoffMs: number;
  backoff: { firstMs: number; maxMs: number };
  /** Why it waits, or why it ended. */
  reason: string | null;
  /** How it ends once stopping is over. */
  outcome: 'completed' | 'failed' | null;
  /** Every part ran at once at some point: the ensemble is `running` from then on. */
  ran: boolean;
}

export type EnsembleEvent =
  | { type: 'part'; change: PartChanged }
  | { type: 'restarted'; part: string; jobId: string }
  | { type: 'restart_failed'; part: string; reason: string }
  | { type: 'cancel'; reason: string };

/** What the invoked `place` is given and answers: the parts waiting, and where each was reserved. */
export type PlaceRoundInput = { ensemble: string; parts: PartCtx[] };
export type PlaceRoundOutput = Record<string, string>;

export interface EnsembleInput {
  id: string;
  parts: Record<string, PartCtx>;
  backoff?: { firstMs: number; maxMs: number };
}

export const DEFAULT_ENSEMBLE_BACKOFF = { firstMs: 1_000, maxMs: 8_000 };

/** What a part child is told: how its part stands now. */
type PartStatusEvent = { type: 'status'; status: PartCtx['status']; assigned: boolean; restarting: boolean };

/**
 * One part, as a child of its ensemble's machine (named `<ensemble id>/<part>`), so the dev
 * stream and page show each part's history beside the ensemble's. The ensemble decides; the
 * child shows what it decided and what the part's job reported:
 *
 *   waiting ──assigned a node──▶ assigned ──running──▶ running ──▶ completed | failed
 *   any ──back to pending (its node lost)──▶ waiting        failed ──restart──▶ restarting ──▶ waiting
 *
 * (`judging` is transient: each report goes through it to the state it stands for.)
 */
export const partMachine = setup({
  types: { events: {} as PartStatusEvent, input: {} as Omit<PartStatusEvent, 'type'>, context: {} as Omit<PartStatusEvent, 'type'> },
  guards: {
    restarting: ({ context }) => context.restarting,
    running: ({ context }) => context.status === 'running',
    completed: ({ context }) => context.status === 'completed',
    failed: ({ context }) => context.status === 'failed',
    assigned: ({ context }) => context.assigned,
  },
}).createMachine({
  id: 'part',
  context: ({ input }) => input,
  initial: 'judging',
  on: { status: { target: '.judging', actions: assign(({ event }) => ({ status: event.status, assigned: event.assigned, restarting: event.restarting })) } },
  states: {
    // Transient: where the part stands now (never a state it is seen in, as the job machine's routing).
    judging: {
      always: [
        { guard: 'restarting', target: 'restarting' },
        { guard: 'running', target: 'running' },
        { guard: 'completed', target: 'completed' },
        { guard: 'failed', target: 'failed' },
        { guard: 'assigned', target: 'assigned' },
        { target: 'waiting' },
      ],
    },
    waiting: {},
    assigned: {},
    running: {},
    completed: {},
    failed: {},
    restarting: {},
  },
});

const ended = (p: PartCtx) => p.status === 'completed' || p.status === 'failed';
/** Its new job is being made (restart.on: failure). */
const restarting = (p: PartCtx) => p.jobId === null && p.status === 'pending';
const all = (ctx: EnsembleContext) => Object.values(ctx.parts);
/** A part waiting for a node that no round is placing now. */
const waitingForNode = (p: PartCtx) => p.status === 'pending' && !p.assigned && p.jobId !== null;
/** Failed, with no restart coming: its failure is the ensemble's unless it is optional. */
const fatal = (p: PartCtx) => p.status === 'failed' && !p.optional && !(p.restartOn === 'failure' && p.restarts < p.maxRestarts);
const mayRestart = (p: PartCtx) => p.status === 'failed' && p.restartOn === 'failure' && p.restarts < p.maxRestarts;
/** Failed with a restart left and still holding the failed job: no new job asked for yet. */
const restartDue = (p: PartCtx) => mayRestart(p) && p.jobId !== null;
/**
 * Before the ensemble ran, `failed` came back to pending from the node it held (its start
 * refused, or that node lost): the round that placed it did not place the ensemble, so every
 * other part still holding a node (reserved, starting or running) is let go and placed again with
 * it. Parts that ended (a short task that completed) stay as they are.
 */
const releasedWith = (ctx: EnsembleContext, failed: string) =>
  all(ctx).filter((q) => q.part !== failed && q.jobId !== null && q.node !== null && !ended(q));

export const ensembleMachine = setup({
  types: { context: {} as EnsembleContext, events: {} as EnsembleEvent, input: {} as EnsembleInput },
  actors: {
    part: partMachine,
    /** Reserves every part given, all or nothing, tells the hosts who hosts what, and assigns each part its node. */
    place: fromPromise<PlaceRoundOutput, PlaceRoundInput>(() => new Promise<PlaceRoundOutput>(() => {})),
  },
  actions: {
    /** Each part child hears how its part stands now, after the context took the change. */
    tellParts: ({ context, self }) => {
      const children = self.getSnapshot().children as Record<string, { send(e: PartStatusEvent): void } | undefined>;
      for (const p of Object.values(context.parts)) children[`${context.id}/${p.part}`]?.send({ type: 'status', status: p.status, assigned: p.assigned, restarting: restarting(p) });
    },
    /** A part's report: how it stands now. */
    note: assign(({ context, event }) => {
      if (event.type !== 'part') return {};
      const c = event.change;
      const p = context.parts[c.part];
      // A report about an earlier job of the part (one that was restarted) changes nothing.
      if (!p || p.jobId !== c.job_id) return {};
      // Assigned and not yet heard back: still this round's, not placed again.
      const next: PartCtx = { ...p, status: c.status, node: c.node, error: c.error, exclude: c.exclude, assigned: c.status === 'pending' && p.assigned && c.node !== null };
      const parts = { ...context.parts, [c.part]: next };
      return { parts, ran: context.ran || Object.values(parts).every((q) => q.status !== 'pending') };
    }),
    /** Makes a new job for a part that failed (restart.on: failure); answers `restarted` or `restart_failed`. */
    restart: (_, _params: { part: string }) => {},
    /** Cancels one part's job (its lease released, its container stopped), with the reason. */
    cancelPart: (_, _params: { jobId: string; reason: string }) => {},
    /** Cancels every part still unfinished, with the reason. */
    stopParts: (_, _params: { reason: string }) => {},
    /** The grant the hosts hold is withdrawn (the ensemble ended). */
    revoke: () => {},
  },
  delays: {
    /** The wait the last fruitless round set. */
    backoff: ({ context }) => context.backoffMs,
  },
  guards: {
    // Not while a part's new job is being made: a round places every part that waits, together.
    needsPlacing: ({ context }) => all(context).some(waitingForNode) && !all(context).some(restarting),
    startFailedBeforeRunning: ({ context, event }) => {
      if (event.type !== 'part' || context.ran) return false;
      const p = context.parts[event.change.part];
      return !!p && p.jobId === event.change.job_id && p.node !== null && event.change.status === 'pending' && event.change.node === null;
    },
    tasksDone: ({ context }) => {
      const tasks = all(context).filter((p) => p.kind === 'task');
      return tasks.length > 0 && tasks.every((p) => p.status === 'completed' || (p.status === 'failed' && !fatal(p) && !mayRestart(p)));
    },
    failed: ({ context }) => all(context).some(fatal),
    restartDue: ({ context }) => all(context).some(restartDue),
    allEnded: ({ context }) => all(context).every(ended),
  },
}).createMachine({
  id: 'ensemble',
  context: ({ input }) => ({
    id: input.id,
    parts: input.parts,
    backoffMs: 0,
    backoff: input.backoff ?? DEFAULT_ENSEMBLE_BACKOFF,
    reason: null,
    outcome: null,
    ran: all({ parts: input.parts } as EnsembleContext).every((p) => p.status !== 'pending'),
  }),
  initial: 'active',
  // Each part a child machine, named `<ensemble id>/<part>`: its lane on the dev page.
  entry: [
    enqueueActions(({ context, enqueue }) => {
      for (const p of Object.values(context.parts)) {
        enqueue.spawnChild('part', { id: `${context.id}/${p.part}`, input: { status: p.status, assigned: p.assigned, restarting: restarting(p) } });
      }
    }),
  ],
  on: {
    part: { actions: ['note', 'tellParts'] },
    restarted: {
      actions: [
        assign(({ context, event }) => {
          const p = context.parts[event.part]!;
          return { parts: { ...context.parts, [event.part]: { ...p, jobId: event.jobId, status: 'pending' as const, node: null, assigned: false, error: null } } };
        }),
        'tellParts',
      ],
    },
    restart_failed: {
      actions: [
        assign(({ context, event }) => {
          const p = context.parts[event.part]!;
          return { parts: { ...context.parts, [event.part]: { ...p, maxRestarts: p.restarts, status: 'failed' as const, error: `could not be started again: ${event.reason}` } } };
        }),
        'tellParts',
      ],
    },
  },
  states: {
    active: {
      always: [
        { guard: 'failed', target: 'stopping', actions: assign(({ context }) => ({ outcome: 'failed' as const, reason: whyFailed(context) })) },
        // A failure with restarts left that no `part` event acted on: the part's job failed
        // before this machine was rebuilt from the stored rows (e.g. by the node's own start-up
        // recovery), or was reported while placing or waiting. Its policy holds all the same.
        {
          guard: 'restartDue',
          actions: [
            enqueueActions(({ context, enqueue }) => {
              const p = all(context).find(restartDue)!;
              enqueue.assign({ parts: { ...context.parts, [p.part]: { ...p, status: 'pending' as const, jobId: null, node: null, assigned: false, restarts: p.restarts + 1 } } });
              enqueue({ type: 'restart', params: { part: p.part } });
            }),
            'tellParts',
          ],
        },
        { guard: 'tasksDone', target: 'stopping', actions: assign({ outcome: 'completed' as const, reason: 'every task completed' }) },
        { guard: 'needsPlacing', target: 'placing' },
      ],
      on: {
        part: [
          // All or nothing until it ran: one part's start refused lets go of every other part's node.
          {
            guard: 'startFailedBeforeRunning',
            actions: [
              enqueueActions(({ context, event, enqueue }) => {
                if (event.type !== 'part') return;
                const reason = `its ensemble is placed again: ${whyPlacedAgain(context, event.change)}`;
                for (const q of releasedWith(context, event.change.part)) {
                  enqueue({ type: 'cancelPart', params: { jobId: q.jobId!, reason } });
                  enqueue({ type: 'restart', params: { part: q.part } });
                }
              }),
              assign(({ context, event }) => {
                if (event.type !== 'part') return {};
                const parts = { ...context.parts };
                for (const q of releasedWith(context, event.change.part)) parts[q.part] = { ...q, status: 'pending' as const, jobId: null, node: null, assigned: false };
                return { parts, reason: `placing every part again: ${whyPlacedAgain(context, event.change)}` };
              }),
              'note',
              'tellParts',
            ],
          },
          // A failure with restarts left: a new job for the part, placed like the first.
          {
            guard: ({ context, event }) => {
              const p = context.parts[event.change.part];
              return !!p && p.jobId === event.change.job_id && event.change.status === 'failed' && p.restartOn === 'failure' && p.restarts < p.maxRestarts;
            },
            actions: [
              'note',
              assign(({ context, event }) => {
                const p = context.parts[event.change.part]!;
                return { parts: { ...context.parts, [p.part]: { ...p, status: 'pending' as const, jobId: null, node: null, assigned: false, restarts: p.restarts + 1 } } };
              }),
              { type: 'restart', params: ({ event }) => ({ part: event.change.part }) },
              'tellParts',
            ],
          },
          { actions: ['note', 'tellParts'] },
        ],
        cancel: { target: 'stopping', actions: assign(({ event }) => ({ outcome: 'failed' as const, reason: event.reason })) },
      },
    },
    placing: {
      invoke: {
        src: 'place',
        input: ({ context }) => ({ ensemble: context.id, parts: all(context).filter(waitingForNode) }),
        onDone: {
          target: 'active',
          actions: [
            assign(({ context, event }) => {
              const parts = { ...context.parts };
              for (const [name, node] of Object.entries(event.output)) parts[name] = { ...parts[name]!, node, assigned: true };
              return { parts, backoffMs: 0, reason: null };
            }),
            'tellParts',
          ],
        },
        onError: {
          target: 'waiting',
          actions: assign(({ context, event }) => ({
            backoffMs: Math.min(context.backoff.maxMs, context.backoffMs * 2 || context.backoff.firstMs),
            reason: `waiting for nodes: ${errorText(event.error)}`,
          })),
        },
      },
      on: { cancel: { target: 'stopping', actions: assign(({ event }) => ({ outcome: 'failed' as const, reason: event.reason })) } },
    },
    waiting: {
      after: { backoff: 'active' },
      on: { cancel: { target: 'stopping', actions: assign(({ event }) => ({ outcome: 'failed' as const, reason: event.reason })) } },
    },
    stopping: {
      entry: { type: 'stopParts', params: ({ context }) => ({ reason: context.outcome === 'completed' ? 'its ensemble completed' : `its ensemble failed: ${context.reason}` }) },
      always: [
        { guard: ({ context }) => all(context).every(ended) && context.outcome === 'completed', target: 'completed' },
        { guard: 'allEnded', target: 'failed' },
      ],
    },
    completed: { type: 'final', entry: 'revoke' },
    failed: { type: 'final', entry: 'revoke' },
  },
});

function whyPlacedAgain(ctx: EnsembleContext, c: PartChanged): string {
  const node = ctx.parts[c.part]?.node;
  return `part ${c.part} did not start${node ? ` on node ${node}` : ''}: ${c.error ?? 'no reason given'}`;
}

function whyFailed(ctx: EnsembleContext): string {
  const p = all(ctx).find(fatal)!;
  return `part ${p.part} failed${p.restarts > 0 ? ` after ${p.restarts} restart(s)` : ''}: ${p.error ?? 'no reason given'}`;
}

export type EnsembleMachine = typeof ensembleMachine;
