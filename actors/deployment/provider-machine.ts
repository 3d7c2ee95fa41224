/**
 * The provider's side of one deployment, as an xstate machine (machine `deployment`, instance
 * the job id, on the node's event stream). It decides: every check a requester's reserve or
 * start must pass is a guard here, on an event that carries the requester, and the lease is
 * this machine's `after`, the only clock that ends it.
 *
 *   offered ──reserve [onboarded, bid for, not barred, as bid, within quota]──▶ leasing
 *      └──bid window over──▶ released                                        │
 *                      released ◀──lease refused (the share went)─────────────┤
 *                                                                             ▼ leased
 *   released ◀──lease ran out (after lease, never renewed)─────────────── reserved
 *   released ◀──release [holder]───────────────────────────────────────────┘ │
 *                                                                             │ start [holder, within lease, no volume]
 *   released ◀──start failed── starting ──accepted──▶ running ──ended──▶ released
 *   leasing ──release [holder]──▶ abandoned: released once leased (its share given back)
 *   starting, running ──release [holder]──▶ abandoned: stopped once it runs (abandon)
 *
 * A refused event leaves the state as it was and says why in `refusal`. Leaving `reserved`
 * other than by a start gives the share back (`returnShare`, supplied by the deployment actor).
 * A holder releases a job it asked to reserve or start only when it gave up waiting for the
 * answer (and will place the job elsewhere): the lease is let go, the job stopped here
 * (`abandon`, supplied by the deployment actor), so it never runs twice with no one following it
 * here, nor holds a share that runs out unstarted.
 */
import { assign, setup } from 'xstate';
import type { ResourceSpec } from '../../behaviors/jobs/schema.js';
import { formatBytes } from '../../runtime/bytes.js';
import type { ErrorKind } from '../../runtime/errors.js';
import { coresText, fitsWithin } from '../resources/ledger.js';

export interface ProviderLimits {
  /** Longest lease granted (deployment.lease_ms). */
  leaseMs: number;
  /** Part of the onboarded share a requester's unstarted leases may hold beyond its first (deployment.lease_share). */
  leaseShare: number;
  /** Unstarted leases one requester may hold (deployment.max_unstarted_leases). */
  maxLeases: number;
}

export interface ProviderInput {
  jobId: string;
  /** Peer id of the node the job was offered by, or of the node asking when it was not offered. */
  requester: string;
  /** What this node bid for, or null: it did not bid for the job lately. */
  bid: { resources: ResourceSpec; validMs: number } | null;
  limits: ProviderLimits;
  /** The ensemble the lease is a part of (ReserveRequest.group); absent or null for a job of its own. */
  group?: string | null;
  /**
   * Its reserve carries the job's start (ReserveRequest.start): this node starts it in the same
   * request, so it never rests unstarted and the bounds on a requester's unstarted leases do not
   * count it. A start that fails lets the lease go as `released`, a strike like any other.
   */
  startCarried?: boolean;
}

export interface Refusal {
  kind: ErrorKind;
  message: string;
}

interface ProviderContext extends ProviderInput {
  /** What the lease holds, once leased: what the job runs on and is limited to. */
  lease: ResourceSpec | null;
  until: string | null;
  /** Why the last event was refused; null when it was taken. */
  refusal: Refusal | null;
  /** How the deployment left `reserved` without starting: the requester's strike (see Strikes). */
  unstarted: 'expired' | 'released' | null;
  /** Its holder released it before the answer to its reserve or start: let go once leased, stopped once it runs. */
  abandoned: boolean;
}

/** What a requester's other unstarted leases here hold now. */
export interface Holding {
  count: number;
  /** Those outside this lease's ensemble: with none, this lease (and its ensemble's) is the requester's first. */
  others: number;
  cores: number;
  memory: number;
}

export type ProviderEvent =
  | {
      type: 'reserve';
      requester: string;
      resources: ResourceSpec;
      /** The requester is this node (its own actors): no share, quota or bar applies. */
      here: boolean;
      /** Whether the operator onboarded a share, and its size. */
      share: { offered: boolean; offering: ResourceSpec };
      holding: Holding;
      /** Why the requester may not reserve here for now (it let leases go unstarted); null when it may. */
      barred: string | null;
    }
  | { type: 'leased'; until: string; resources: ResourceSpec }
  | { type: 'lease_refused'; reason: string }
  | {
      type: 'start';
      requester: string;
      resources: ResourceSpec;
      /** The requester is this node (its own actors, an ensemble's part placed here). */
      here: boolean;
      /** The volumes (`volume:<name>` inputs) the job would mount: this node's operator's own. */
      volumes: readonly string[];
    }
  | { type: 'accepted' }
  | { type: 'start_failed' }
  /** The node could not take the job now (its run before still stopping, the node stopping): no fault of the requester's. */
  | { type: 'start_deferred' }
  | { type: 'release'; requester: string }
  | { type: 'ended' };

type Ev<T extends ProviderEvent['type']> = Extract<ProviderEvent, { type: T }>;
type Check<T extends ProviderEvent['type']> = (c: ProviderContext, e: Ev<T>) => Refusal | null;

const sizeOf = (r: ResourceSpec) => `${coresText(r.cpu.cores)}, ${formatBytes(r.memory.size)}`;

type ReserveCheck = 'nothingOnboarded' | 'notBidFor' | 'offeredByAnother' | 'barred' | 'moreThanBid' | 'tooManyLeases' | 'overShare';
type StartCheck = 'notHolder' | 'overLease' | 'mountsVolume';

/** The reserve checks, in the order a refusal names them. */
const reserveChecks: Record<ReserveCheck, Check<'reserve'>> = {
  nothingOnboarded: (_, e) =>
    e.here || e.share.offered ? null : { kind: 'forbidden', message: 'this node offers nothing to the network (no onboarded share)' },
  notBidFor: (c) =>
    c.bid ? null : { kind: 'conflict', message: `this node did not bid for job ${c.jobId} lately: ask it with /dms/deployment/bid first` },
  offeredByAnother: (c, e) => (e.requester === c.requester ? null : { kind: 'conflict', message: `job ${c.jobId} was offered here by another node` }),
  barred: (_, e) => (e.here || e.barred === null ? null : { kind: 'overloaded', message: e.barred }),
  moreThanBid: (c, e) =>
    fitsWithin(e.resources, c.bid!.resources)
      ? null
      : { kind: 'invalid', message: `resources: asks ${sizeOf(e.resources)}, more than job ${c.jobId} was offered with (${sizeOf(c.bid!.resources)})` },
  tooManyLeases: (c, e) =>
    e.here || c.startCarried || e.holding.count < c.limits.maxLeases
      ? null
      : { kind: 'overloaded', message: `your node holds ${e.holding.count} reservations here not yet started (deployment.max_unstarted_leases)` },
  overShare: (c, e) => {
    if (e.here || c.startCarried || e.holding.others === 0) return null;
    const part = c.limits.leaseShare;
    const bound = { cores: part * e.share.offering.cpu.cores, memory: part * e.share.offering.memory.size };
    const cpu = e.holding.cores + e.resources.cpu.cores;
    const memory = e.holding.memory + e.resources.memory.size;
    // Compared in millicores, as the ledger counts, so 0.1 + 0.2 is not over 0.3.
    if (Math.round(cpu * 1000) <= Math.round(bound.cores * 1000) && memory <= bound.memory) return null;
    return {
      kind: 'overloaded',
      message: `your node's unstarted reservations here would hold ${coresText(cpu)}, ${formatBytes(memory)}: more than ${part * 100}% of its share (${coresText(bound.cores)}, ${formatBytes(Math.floor(bound.memory))}; deployment.lease_share); start or release them first`,
    };
  },
};

const startChecks: Record<StartCheck, Check<'start'>> = {
  notHolder: (c, e) =>
    e.requester === c.requester ? null : { kind: 'conflict', message: `job ${c.jobId} holds no reservation of yours here (the lease may have run out)` },
  overLease: (c, e) =>
    fitsWithin(e.resources, c.lease!)
      ? null
      : { kind: 'invalid', message: `resources: job ${c.jobId} asks ${sizeOf(e.resources)}, more than its reservation here holds (${sizeOf(c.lease!)})` },
  // A volume holds what the operator's own jobs left there; another node's job would read and
  // write it. Its own jobs may, as they may through REST (where they are kept on this node).
  mountsVolume: (_, e) =>
    e.here || e.volumes.length === 0
      ? null
      : { kind: 'forbidden', message: `inputs: volume:${e.volumes[0]} is this node's own: a job of another node's cannot mount a volume` },
};

const notHolder: Check<'release'> = (c, e) => (e.requester === c.requester ? null : { kind: 'conflict', message: `job ${c.jobId} is reserved here by another node` });

/** One guarded transition per check, in order: a failing check refuses the event and says why. */
function refusing<N extends ReserveCheck | StartCheck>(checks: Record<N, unknown>) {
  return (Object.keys(checks) as N[]).map((check) => ({ guard: check, actions: { type: 'refuse' as const, params: { check } } }));
}

type Args = { context: ProviderContext; event: ProviderEvent };
const fails = (check: ReserveCheck | StartCheck, { context, event }: Args): Refusal | null => {
  if (event.type === 'reserve' && check in reserveChecks) return reserveChecks[check as ReserveCheck](context, event);
  if (event.type === 'start' && check in startChecks) return startChecks[check as StartCheck](context, event);
  return null;
};
const guard = (check: ReserveCheck | StartCheck) => (a: Args) => fails(check, a) !== null;

export const providerMachine = setup({
  types: { context: {} as ProviderContext, events: {} as ProviderEvent, input: {} as ProviderInput },
  delays: {
    bidValid: ({ context }) => context.bid?.validMs ?? 0,
    lease: ({ context }) => context.limits.leaseMs,
  },
  guards: {
    nothingOnboarded: guard('nothingOnboarded'),
    notBidFor: guard('notBidFor'),
    offeredByAnother: guard('offeredByAnother'),
    barred: guard('barred'),
    moreThanBid: guard('moreThanBid'),
    tooManyLeases: guard('tooManyLeases'),
    overShare: guard('overShare'),
    notHolder: guard('notHolder'),
    overLease: guard('overLease'),
    mountsVolume: guard('mountsVolume'),
    otherRequester: ({ context, event }) => (event.type === 'release' || event.type === 'reserve') && event.requester !== context.requester,
    abandoned: ({ context }) => context.abandoned,
  },
  actions: {
    refuse: assign({ refusal: (a, { check }: { check: ReserveCheck | StartCheck }) => fails(check, a) }),
    refuseRelease: assign({ refusal: ({ context, event }) => notHolder(context, event as Ev<'release'>) }),
    taken: assign({ refusal: null }),
    // Supplied by the deployment actor: tells the resource manager to free the lease.
    returnShare: () => {},
    // Supplied by the deployment actor: stops the job its holder gave up on.
    abandon: () => {},
  },
}).createMachine({
  id: 'deployment',
  context: ({ input }) => ({ ...input, lease: null, until: null, refusal: null, unstarted: null, abandoned: false }),
  initial: 'offered',
  states: {
    offered: {
      after: { bidValid: 'released' },
      on: { reserve: [...refusing(reserveChecks), { target: 'leasing', actions: 'taken' }] },
    },
    leasing: {
      on: {
        leased: [
          { guard: 'abandoned', target: 'released', actions: ['returnShare', assign({ unstarted: 'released' as const })] },
          { target: 'reserved', actions: assign({ lease: ({ event }) => event.resources, until: ({ event }) => event.until }) },
        ],
        lease_refused: { target: 'released', actions: assign({ refusal: ({ event }) => ({ kind: 'conflict' as const, message: event.reason }) }) },
        release: [{ guard: 'otherRequester', actions: 'refuseRelease' }, { actions: ['taken', assign({ abandoned: true })] }],
      },
    },
    reserved: {
      after: { lease: { target: 'released', actions: ['returnShare', assign({ unstarted: 'expired' as const })] } },
      on: {
        // Asked again by its holder: the same lease, not a longer one.
        reserve: [{ guard: 'otherRequester', actions: assign({ refusal: ({ context }) => ({ kind: 'conflict' as const, message: `job ${context.jobId} is reserved here by another node` }) }) }, { actions: 'taken' }],
        start: [...refusing(startChecks), { target: 'starting', actions: 'taken' }],
        release: [{ guard: 'otherRequester', actions: 'refuseRelease' }, { target: 'released', actions: ['taken', 'returnShare', assign({ unstarted: 'released' as const })] }],
      },
    },
    starting: {
      on: {
        accepted: [{ guard: 'abandoned', target: 'running', actions: 'abandon' }, { target: 'running' }],
        start_failed: { target: 'released', actions: ['returnShare', assign({ unstarted: 'released' as const })] },
        start_deferred: { target: 'released', actions: 'returnShare' },
        release: [{ guard: 'otherRequester', actions: 'refuseRelease' }, { actions: ['taken', assign({ abandoned: true })] }],
      },
    },
    running: {
      on: {
        ended: 'released',
        release: [
          { guard: 'otherRequester', actions: 'refuseRelease' },
          { guard: 'abandoned', actions: 'taken' },
          { actions: ['taken', assign({ abandoned: true }), 'abandon'] },
        ],
      },
    },
    released: { type: 'final' },
  },
});
