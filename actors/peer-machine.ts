/**
 * One peer as the discovery actor sees it, as an xstate machine (id `peer`). The machine
 * holds the rules: when to dial, greet, wait and give up; the discovery actor supplies the
 * effects (the dial, the hello exchange, logging) through `provide`, so the rules read here
 * in one place and run in tests without a network.
 *
 *   new (left at once) ─▶ dialing (a bootstrap peer) | connected (any other: it connected)
 *   dialing       ─dialled, or connected─▶ connected      ─failed─▶ backoff
 *   backoff       ─after: redial delay (doubling, capped)─▶ dialing   ─connected─▶ connected
 *   connected     ─disconnected─▶ reconnecting (a bootstrap peer) | gone (any other; final)
 *     hello       ─answered─▶ greeted   ─refused─▶ ungreeted
 *                 ─no answer─▶ helloRetry (attempts left) | ungreeted
 *     helloRetry  ─after: attempt × helloRetryMs─▶ hello
 *   reconnecting  ─connected─▶ connected   ─redialFailed (libp2p gave up)─▶ backoff
 *
 * Only bootstrap peers are dialled, and only where libp2p does not: it dials them at start
 * and redials them after a loss (they carry its keep-alive tag, runtime/network/host.ts), but
 * it never retries a first dial that failed, and it gives up redialling after about 30 s.
 * Every count and delay is bounded (PeerLimits); the discovery actor bounds how many machines
 * there are.
 */
import { assign, fromPromise, setup } from 'xstate';

export interface PeerLimits {
  /** First redial delay after a failed dial; it doubles with each further failure. */
  redialMinMs: number;
  /** Cap on the redial delay: a bootstrap peer down for long costs one dial per this interval. */
  redialMaxMs: number;
  /** Hellos sent to a connected peer before it counts as not a DMS node (or wedged). */
  helloAttempts: number;
  /** Pause before the next hello, times the attempt: a fast failure (a stream reset while the peer starts) must not use up every attempt at once. */
  helloRetryMs: number;
}

export interface PeerInput {
  peer: string;
  /** The bootstrap multiaddrs of this peer; empty for a peer that merely connected. */
  addresses: readonly string[];
  limits: PeerLimits;
}

export interface PeerContext extends PeerInput {
  /** The DID the peer gave in the hello exchange, checked against its key; null until then. */
  did: string | null;
  /** Dials failed since the peer was last connected. */
  failures: number;
  /** The delay chosen for the current backoff (ms); never over `limits.redialMaxMs`. */
  retryMs: number;
  /** Hellos sent since the peer (re)connected. */
  helloAttempts: number;
}

export type PeerEvent =
  /** libp2p has a connection to the peer now. */
  | { type: 'connected' }
  /** The peer's last connection closed. */
  | { type: 'disconnected' }
  /** libp2p gave up redialling the lost keep-alive peer. */
  | { type: 'redialFailed' };

/** What the hello exchange learnt: the peer's DID, or why it has none and asking again is pointless. */
export type HelloOutcome = { did: string } | { refused: string };

/** The delay before redial number `failures + 1`: doubling from the minimum, jittered, capped. */
export function redialDelay(limits: PeerLimits, failures: number, random = Math.random()): number {
  // Jitter keeps the nodes that lost the same bootstrap peer from redialling it in lockstep.
  const doubled = limits.redialMinMs * 2 ** Math.min(failures - 1, 30) * (0.75 + random * 0.5);
  return Math.round(Math.min(doubled, limits.redialMaxMs));
}

export const peerMachine = setup({
  types: {
    context: {} as PeerContext,
    events: {} as PeerEvent,
    input: {} as PeerInput,
  },
  actors: {
    // Effects, supplied by the discovery actor.
    dial: fromPromise<string, { addresses: readonly string[] }>(() => Promise.reject(new Error('dial not provided'))),
    hello: fromPromise<HelloOutcome, { peer: string }>(() => Promise.reject(new Error('hello not provided'))),
  },
  actions: {
    countFailure: assign(({ context }) => ({ failures: context.failures + 1, retryMs: redialDelay(context.limits, context.failures + 1) })),
    // Effects, supplied by the discovery actor.
    greeted: () => {},
    helloFailed: (_, _params: { error: unknown; final: boolean }) => {},
    /** Runs after countFailure: the context has the new `failures` and `retryMs`. */
    dialFailed: (_, _params: { error: unknown }) => {},
    lost: () => {},
  },
  guards: {
    bootstrap: ({ context }) => context.addresses.length > 0,
    helloAttemptsLeft: ({ context }) => context.helloAttempts < context.limits.helloAttempts,
  },
  delays: {
    redial: ({ context }) => context.retryMs,
    helloRetry: ({ context }) => context.limits.helloRetryMs * context.helloAttempts,
  },
}).createMachine({
  id: 'peer',
  context: ({ input }) => ({ ...input, did: null, failures: 0, retryMs: 0, helloAttempts: 0 }),
  initial: 'new',
  states: {
    // Resolved before the first snapshot: a bootstrap peer is dialled (at once if libp2p
    // already has it), any other peer is here because it connected.
    new: { always: [{ guard: 'bootstrap', target: 'dialing' }, { target: 'connected' }] },
    dialing: {
      invoke: {
        src: 'dial',
        input: ({ context }) => ({ addresses: context.addresses }),
        onDone: 'connected',
        onError: {
          target: 'backoff',
          actions: [
            'countFailure',
            { type: 'dialFailed', params: ({ event }) => ({ error: event.error }) },
          ],
        },
      },
      on: { connected: 'connected' },
    },
    backoff: {
      after: { redial: 'dialing' },
      on: { connected: 'connected' },
    },
    connected: {
      entry: assign({ failures: 0, retryMs: 0, helloAttempts: 0 }),
      initial: 'hello',
      on: {
        disconnected: [
          { guard: 'bootstrap', target: 'reconnecting', actions: [assign({ did: null }), 'lost'] },
          { target: 'gone', actions: [assign({ did: null }), 'lost'] },
        ],
      },
      states: {
        hello: {
          entry: assign({ helloAttempts: ({ context }) => context.helloAttempts + 1 }),
          invoke: {
            src: 'hello',
            input: ({ context }) => ({ peer: context.peer }),
            onDone: [
              {
                guard: ({ event }) => 'did' in event.output,
                target: 'greeted',
                actions: [
                  assign({ did: ({ event }) => (event.output as { did: string }).did }),
                  'greeted',
                ],
              },
              { target: 'ungreeted', actions: { type: 'helloFailed', params: ({ event }) => ({ error: (event.output as { refused: string }).refused, final: true }) } },
            ],
            onError: [
              { guard: 'helloAttemptsLeft', target: 'helloRetry', actions: { type: 'helloFailed', params: ({ event }) => ({ error: event.error, final: false }) } },
              { target: 'ungreeted', actions: { type: 'helloFailed', params: ({ event }) => ({ error: event.error, final: true }) } },
            ],
          },
        },
        helloRetry: { after: { helloRetry: 'hello' } },
        greeted: {},
        // Connected, but not a DMS node, or one that gave no usable answer: not asked again until it reconnects.
        ungreeted: {},
      },
    },
    // libp2p redials a lost bootstrap peer itself (keep-alive tag); this machine takes over
    // only when libp2p gives up.
    reconnecting: {
      on: {
        connected: 'connected',
        redialFailed: {
          target: 'backoff',
          actions: [
            'countFailure',
            { type: 'dialFailed', params: { error: 'libp2p gave up redialling it' } },
          ],
        },
      },
    },
    gone: { type: 'final' },
  },
});

/** The state of a peer machine as one word or path: 'dialing', 'connected.greeted', … */
export function peerState(value: unknown): string {
  if (typeof value === 'string') return value;
  const [key, sub] = Object.entries(value as Record<string, unknown>)[0] ?? ['?', undefined];
  return sub === undefined ? key : `${key}.${peerState(sub)}`;
}
