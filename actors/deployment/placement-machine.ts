/**
 * The requester's side of placing one job on the network, as an xstate machine (so each step
 * is a `transition` event on the node's stream, machine `placement`, instance the job id):
 *
 *   bidding: offering ──offered──▶ collecting ──enough / unbeatable / window──▶ ranking
 *            ranking ──no bid, answers expected──▶ stragglers
 *            ranking ──only doubtful bids, answers expected──▶ doubtful ──a sure bid / all answered / the bid window──▶ ranking
 *            ranking ──no bid──▶ unplaced      ranking ──this node best──▶ placed
 *            ranking ──▶ reserving ──reserved (and started, when the reserve carried the job)──▶ placed
 *                           ├──refused, bids left──▶ ranking (those ranked, and those come meanwhile)
 *                           ├──refused, none left, answers to come──▶ collecting
 *                           ├──refused, none left, window closed, answers expected──▶ stragglers
 *                           │        stragglers ──a late bid──▶ ranking; ──all answered / the bid window──▶ unplaced
 *                           └──refused, none left──▶ unplaced
 *            offering, collecting ──offer_failed──▶ unplaced
 *
 * What follows a placement (starting, running, done) is the job machine's
 * (actors/orchestrator/machine.ts). The effects (publishing the offer and collecting the
 * bids, asking a bidder to reserve) are supplied by the deployment actor.
 */
import { and, assign, type EventObject, fromCallback, fromPromise, setup } from 'xstate';
import type { Bid, BidAnswer, DeployedJob, NearNode, PlaceReply, StartOutcome } from '../../behaviors/jobs/deployment.js';
import type { Placement, ResourceSpec } from '../../behaviors/jobs/schema.js';
import { errorText } from '../../runtime/errors.js';

export interface PlacementInput {
  jobId: string;
  resources: ResourceSpec;
  executor: string;
  placement: Placement | null;
  /** Nodes this job must not go to (they failed it). */
  exclude: readonly string[];
  /** This node's peer id. */
  self: string;
  /** Nodes that failed some job lately: asked only when no other bidder is left. */
  suspect: ReadonlySet<string>;
  /**
   * Why a bid from a node is not taken whatever it claims (excluded, not trusted with the
   * job's secrets, its signed profile lacks what the job asks for: ./bidders.ts); null to take it.
   */
  vet?: (node: string) => string | null;
  /**
   * Whether a bid's free room still holds the job beside this node's own leases there that the
   * bid may not show (./own-leases.ts); a bid that does not is ranked after those that do, and
   * is never unbeatable. Every bid fits when absent.
   */
  fits?: (bid: NodeBid) => boolean;
  /** A part that must run near another part's node: a bid without a round trip within the bound is declined. */
  near?: NearNode | null;
  /** The ensemble the job is a part of, which its lease names (ReserveRequest.group). */
  group?: string | null;
  /** The job, to start with its reserve (ReserveRequest.start); null to reserve only. */
  start?: DeployedJob | null;
}

/** What the invoked `reserve` is given: the bidder to ask, the lease, and the job to start on it (or null). */
export type ReserveInput = { node: string; jobId: string; resources: ResourceSpec; group: string | null; start: DeployedJob | null };

export type OfferEvent =
  | { type: 'offered' }
  | { type: 'bid'; node: string; answer: BidAnswer }
  | { type: 'window_closed' }
  | { type: 'offer_failed'; reason: string };

/** A bid, who made it, and when it came (Date.now()): a lease granted since may not show in it. */
export type NodeBid = Bid & { node: string; at: number };

interface PlacementContext extends PlacementInput {
  bids: NodeBid[];
  declines: { node: string; declined: string }[];
  /** Nodes in `exclude` that bid for it anyway (declines too): what the job could have had. */
  avoided: string[];
  /** Bidders not yet asked to reserve, best first. */
  candidates: NodeBid[];
  chosen: string | null;
  /** What the chosen bidder said of the start its reserve carried. */
  startOutcome: StartOutcome;
  /** Why the bidders asked so far refused to reserve. */
  refusals: string[];
  reason: string | null;
  /** How many answers would be all there can be: with that many the window closes at once. */
  expected: number;
  /** The offer's window has closed: no more answers are waited for. */
  windowClosed: boolean;
  /** Only doubtful bids had come, and the answers still to come were waited for once (`doubtful`). */
  awaitedOthers: boolean;
}

/**
 * Best first: the least loaded, then by chance (so equal nodes share the work). Nodes that
 * failed some job lately come last, and before them those whose bid no longer holds the job
 * beside this node's own leases there (`fits`).
 */
export function rank(bids: readonly NodeBid[], suspect: ReadonlySet<string>, fits: (bid: NodeBid) => boolean = () => true): NodeBid[] {
  const shuffled = bids.map((bid) => ({ bid, luck: Math.random(), full: Number(!fits(bid)) }));
  shuffled.sort((a, b) => Number(suspect.has(a.bid.node)) - Number(suspect.has(b.bid.node)) || a.full - b.full || a.bid.load - b.bid.load || a.luck - b.luck);
  return shuffled.map((s) => s.bid);
}

/** Why a bid for a part that must run near another node is not taken: it says no round trip, or one too long. */
function farFrom(near: NearNode | null | undefined, bid: Bid): string | null {
  if (!near) return null;
  if (bid.rtt_ms === undefined) return `bid without its round trip to ${near.node}, which near asks`;
  return bid.rtt_ms > near.max_rtt_ms ? `its round trip to ${near.node} is ${bid.rtt_ms} ms, more than near.max_rtt_ms (${near.max_rtt_ms} ms)` : null;
}

/** Why nobody bid, in a line a person can act on. */
function whyUnplaced(ctx: PlacementContext): string {
  if (ctx.placement?.node) {
    const declined = ctx.declines.find((d) => d.node === ctx.placement!.node);
    return declined ? `node ${ctx.placement.node} cannot hold it: ${declined.declined}` : `node ${ctx.placement.node} did not answer`;
  }
  if (ctx.declines.length === 0) return 'no node answered the offer';
  const shown = ctx.declines.slice(0, 3).map((d) => `${d.node.slice(-8)}: ${d.declined}`);
  const more = ctx.declines.length > 3 ? `; ${ctx.declines.length - 3} more` : '';
  return `no node can hold it now (${shown.join('; ')}${more})`;
}

/** Why the bidder being asked refused, in a line: its peer id's tail and the error. */
function refusalOf(context: PlacementContext, error: unknown): string {
  return `${context.candidates[0].node.slice(-8)}: ${errorText(error)}`;
}

/**
 * A bid asked only once no other is left: from a node that failed some job lately, or one whose
 * room this node's own lease there may have taken since it bid (`fits`).
 */
const doubtful = (ctx: PlacementContext, bid: NodeBid): boolean => ctx.suspect.has(bid.node) || !(ctx.fits?.(bid) ?? true);

/** Every node that could answer has. */
const answered = (ctx: PlacementContext): boolean => ctx.bids.length + ctx.declines.length >= ctx.expected;

/** Why the job waits when the last candidate refused too. */
const everyBidderRefused = (context: PlacementContext, error: unknown): string =>
  `every bidder refused to reserve (${[...context.refusals, refusalOf(context, error)].slice(0, 3).join('; ')})`;

/**
 * How long late answers are waited for once every bidder so far refused, or only doubtful ones
 * bid: the delay `straggle`, the offer's whole window (`deployment.bid_window_ms`, which the
 * deployment actor provides), this its default.
 */
const STRAGGLE_MS = 500;

/** The bidder asked refused: noted, and its bid no longer counts (it answered, as a decline). */
function refusedBy(context: PlacementContext, error: unknown): Pick<PlacementContext, 'refusals' | 'bids' | 'declines'> {
  const node = context.candidates[0].node;
  return {
    refusals: [...context.refusals, refusalOf(context, error)],
    bids: context.bids.filter((b) => b.node !== node),
    declines: [...context.declines, { node, declined: `refused to reserve: ${errorText(error)}` }],
  };
}

export const placementMachine = setup({
  types: {
    context: {} as PlacementContext,
    events: {} as OfferEvent,
    input: {} as PlacementInput & { expected: number },
    output: {} as PlaceReply,
  },
  actors: {
    // Effects, supplied by the deployment actor: these stand-ins do nothing.
    /** Publishes the offer (or asks the pinned node); sends back offered, each bid, and window_closed. */
    offer: fromCallback<EventObject, PlacementInput>(() => {}),
    /** Asks the bidder to hold the job's resources (a lease), and to start the job on it when given one. */
    reserve: fromPromise<StartOutcome, ReserveInput>(async () => ({})),
  },
  delays: { straggle: STRAGGLE_MS },
  actions: {
    // Left waiting from stragglers: every bidder's refusal when that is how it came there
    // (said on the way in), else the declines, those that came while it waited too.
    sayWhyUnplaced: assign({ reason: ({ context }) => (context.refusals.length > 0 && context.reason ? context.reason : whyUnplaced(context)) }),
  },
  guards: {
    enough: ({ context }) => answered(context),
    // An idle bid that is not doubtful ranks first whatever else comes (rank): waiting for the
    // other answers could only add equals to draw among.
    unbeatable: ({ context }) => context.bids.some((b) => b.load === 0 && !doubtful(context, b)),
    windowClosed: ({ context }) => context.windowClosed,
    noBids: ({ context }) => context.candidates.length === 0,
    selfBest: ({ context }) => context.candidates[0]?.node === context.self,
    // Bids besides the refusing bidder's: those ranked after it, and those that came while it was asked.
    otherBids: ({ context }) => context.bids.some((b) => b.node !== context.candidates[0].node),
    // Ranking stopped early (an idle bid), so answers may still come: wait for them.
    answersToCome: ({ context }) => !context.windowClosed && !answered(context),
    othersExpected: ({ context }) => !answered(context),
    // Every bid so far is doubtful (doubtful()), and the answers to come were not yet waited for.
    onlyDoubtful: ({ context }) => !context.awaitedOthers && context.candidates.length > 0 && context.candidates.every((b) => doubtful(context, b)),
    someoneSure: ({ context }) => context.bids.some((b) => !doubtful(context, b)),
  },
}).createMachine({
  id: 'placement',
  context: ({ input }) => ({
    ...input,
    bids: [],
    declines: [],
    avoided: [],
    candidates: [],
    chosen: null,
    startOutcome: {},
    refusals: [],
    reason: null,
    windowClosed: false,
    awaitedOthers: false,
  }),
  initial: 'bidding',
  states: {
    // The offer stays open until the job is placed or given up: a bidder that refuses to
    // reserve after ranking stopped early leaves the answers still to come to choose from.
    bidding: {
      invoke: { src: 'offer', input: ({ context }) => context },
      initial: 'offering',
      on: {
        bid: {
          actions: assign(({ context, event }) => {
            const { node, answer } = event;
            if (answer.job_id !== context.jobId) return {};
            // A node answering twice adds nothing.
            if (context.bids.some((b) => b.node === node) || context.declines.some((d) => d.node === node)) return {};
            if ('declined' in answer) return { declines: [...context.declines, { node, declined: answer.declined }] };
            // A bidder this job must avoid counts as having answered.
            if (context.exclude.includes(node)) return { declines: [...context.declines, { node, declined: 'failed this job before' }], avoided: [...context.avoided, node] };
            const refused = context.vet?.(node) ?? farFrom(context.near, answer);
            if (refused) return { declines: [...context.declines, { node, declined: refused }] };
            return { bids: [...context.bids, { ...answer, node, at: Date.now() }] };
          }),
        },
        window_closed: { actions: assign({ windowClosed: true }) },
      },
      states: {
        offering: { on: { offered: 'collecting', offer_failed: { target: '#placement.unplaced', actions: assign({ reason: ({ event }) => event.reason }) } } },
        collecting: {
          // Only while waiting: a reservation under way is not given up for a failure of the offer.
          on: { offer_failed: { target: '#placement.unplaced', actions: assign({ reason: ({ event }) => event.reason }) } },
          always: [
            { guard: 'enough', target: 'ranking' },
            { guard: 'unbeatable', target: 'ranking' },
            { guard: 'windowClosed', target: 'ranking' },
          ],
        },
        ranking: {
          entry: assign({ candidates: ({ context }) => rank(context.bids, context.suspect, context.fits) }),
          always: [
            // Only declines when the window closed, and a node still to answer: its bid may just
            // be slow (a loaded provider), and is waited for briefly rather than a back-off.
            { guard: and(['noBids', 'othersExpected']), target: 'stragglers' },
            { guard: 'noBids', target: '#placement.unplaced', actions: assign({ reason: ({ context }) => whyUnplaced(context) }) },
            // Only doubtful bids so far, others are still to answer: those are waited for first.
            // A liar's instant bid closes the window (twice its delay) before an honest node
            // farther away answers, and asking it first cost each job its unanswered reserve (5 s),
            // at every job while it stayed suspect; a bid this node's own lease there overtook
            // is refused, and with the window closed the job waited for the next offer while a
            // slower node had room.
            { guard: and(['onlyDoubtful', 'othersExpected']), target: 'doubtful' },
            // Nothing to reserve across the network: this node's own scheduler reserves for it.
            { guard: 'selfBest', target: '#placement.placed', actions: assign({ chosen: ({ context }) => context.self }) },
            { target: 'reserving' },
          ],
        },
        // The window closed with no bid left (every bidder refused to reserve, or only declines
        // came) and answers are still expected: a fast bidder that refused (a liar, or one that
        // just filled up), or fast declines, do not leave the job waiting a back-off for the
        // answers the offer still collects.
        stragglers: {
          always: [
            { guard: ({ context }) => context.bids.length > 0, target: 'ranking' },
            { guard: 'enough', target: '#placement.unplaced', actions: 'sayWhyUnplaced' },
          ],
          after: { straggle: { target: '#placement.unplaced', actions: 'sayWhyUnplaced' } },
        },
        // Waiting for a bid that is not doubtful, up to the offer's window (`straggle`): then
        // the doubtful ones are asked after all, rather than nobody.
        doubtful: {
          entry: assign({ awaitedOthers: true }),
          always: [
            { guard: 'someoneSure', target: 'ranking' },
            { guard: 'enough', target: 'ranking' },
          ],
          after: { straggle: { target: 'ranking' } },
        },
        reserving: {
          invoke: {
            src: 'reserve',
            input: ({ context }) => ({ node: context.candidates[0].node, jobId: context.jobId, resources: context.resources, group: context.group ?? null, start: context.start ?? null }),
            onDone: { target: '#placement.placed', actions: assign({ chosen: ({ context }) => context.candidates[0].node, startOutcome: ({ event }) => event.output }) },
            onError: [
              { guard: 'otherBids', target: 'ranking', actions: assign(({ context, event }) => refusedBy(context, event.error)) },
              { guard: 'answersToCome', target: 'collecting', actions: assign(({ context, event }) => refusedBy(context, event.error)) },
              {
                // The window closed meanwhile, but not everyone answered: a late bid still counts.
                guard: 'othersExpected',
                target: 'stragglers',
                actions: assign(({ context, event }) => ({ ...refusedBy(context, event.error), reason: everyBidderRefused(context, event.error) })),
              },
              { target: '#placement.unplaced', actions: assign(({ context, event }) => ({ reason: everyBidderRefused(context, event.error) })) },
            ],
          },
        },
      },
    },
    placed: { type: 'final' },
    unplaced: { type: 'final' },
  },
  output: ({ context }) =>
    context.chosen
      ? { node: context.chosen, ...context.startOutcome }
      : { waiting: context.reason ?? 'not placed', ...(context.avoided.length > 0 && context.bids.length === 0 ? { only_avoided: true as const } : {}) },
});
