import { describe, expect, it } from 'vitest';
import { createActor, fromCallback, fromPromise } from 'xstate';
import type { BidAnswer, DeployedJob, StartOutcome } from '../../behaviors/jobs/deployment.js';
import { type OfferEvent, placementMachine, type PlacementInput } from '../../actors/deployment/placement-machine.js';

/*
 * The requester's collection of bids, on its own: when it stops waiting for answers, and whom
 * it then asks to reserve. The machine's effects are stand-ins here; the real offer and
 * reservation run in test/multinode/placement.test.ts.
 */

const SELF = 'node-self';
const resources = { cpu: { cores: 1 }, memory: { size: 1024 }, storage: { size: 0 }, gpus: [] } as unknown as PlacementInput['resources'];

function start(opts: {
  expected: number;
  exclude?: string[];
  suspect?: string[];
  refuse?: string[];
  vet?: (node: string) => string | null;
  fits?: (node: string) => boolean;
  job?: DeployedJob;
  startOutcome?: (node: string) => StartOutcome;
}) {
  let send!: (e: OfferEvent) => void;
  const reserved: string[] = [];
  const asked: string[] = [];
  const startsAsked: (string | null)[] = [];
  const machine = placementMachine.provide({
    actors: {
      offer: fromCallback(({ sendBack }) => {
        send = sendBack as (e: OfferEvent) => void;
        sendBack({ type: 'offered' });
      }),
      reserve: fromPromise(async ({ input }) => {
        startsAsked.push(input.start?.id ?? null);
        asked.push(input.node);
        if (opts.refuse?.includes(input.node)) throw new Error('not enough memory');
        reserved.push(input.node);
        return opts.startOutcome?.(input.node) ?? {};
      }),
    },
  });
  const actor = createActor(machine, {
    input: {
      jobId: 'job-1',
      resources,
      executor: 'null',
      placement: null,
      exclude: opts.exclude ?? [],
      self: SELF,
      suspect: new Set(opts.suspect ?? []),
      ...(opts.vet ? { vet: opts.vet } : {}),
      ...(opts.fits ? { fits: (b: { node: string }) => opts.fits!(b.node) } : {}),
      ...(opts.job ? { start: opts.job } : {}),
      expected: opts.expected,
    },
  });
  actor.start();
  const bid = (node: string, load: number) =>
    send({ type: 'bid', node, answer: { job_id: 'job-1', free: resources, load, executors: ['null'] } as unknown as BidAnswer });
  const decline = (node: string) => send({ type: 'bid', node, answer: { job_id: 'job-1', declined: 'too small' } as BidAnswer });
  const state = () => JSON.stringify(actor.getSnapshot().value);
  const done = () => new Promise<unknown>((resolve) => actor.subscribe((s) => s.status === 'done' && resolve(s.output)));
  return { actor, send: (e: OfferEvent) => send(e), bid, decline, state, done, reserved, asked, startsAsked };
}

describe('placement machine: collecting bids', () => {
  it('a reserve carries the job when it has one, and what the provider said of its start is the placement\'s answer', async () => {
    const job = { id: 'job-1', name: 'j', image: 'none', executor: 'null' } as DeployedJob;
    const m = start({ expected: 2, job, refuse: ['full'], startOutcome: (node) => (node === 'idle' ? { started: true } : {}) });
    const output = m.done();
    m.bid('full', 0);
    m.bid('idle', 0.1);
    // The refusing bidder was asked with the job, and so was the next one.
    expect(await output).toEqual({ node: 'idle', started: true });
    expect(m.startsAsked).toEqual(['job-1', 'job-1']);
  });

  it('a start refused with the reserve is passed on with the node, which holds no lease for it any more', async () => {
    const job = { id: 'job-1', name: 'j', image: 'none', executor: 'null' } as DeployedJob;
    const m = start({ expected: 1, job, startOutcome: () => ({ start_refused: 'mounts volume "data", which is not here' }) });
    const output = m.done();
    m.bid('provider', 0);
    expect(await output).toEqual({ node: 'provider', start_refused: 'mounts volume "data", which is not here' });
  });

  it('without a job the reserve carries none, and the answer is the node alone', async () => {
    const m = start({ expected: 1 });
    const output = m.done();
    m.bid('provider', 0);
    expect(await output).toEqual({ node: 'provider' });
    expect(m.startsAsked).toEqual([null]);
  });

  it("a bid the requester's own checks refuse counts as a decline, however idle it claims to be", async () => {
    const m = start({ expected: 2, vet: (node) => (node === 'liar' ? 'published no profile' : null) });
    const output = m.done();
    m.bid('liar', 0);
    expect(m.state()).toContain('collecting');
    m.bid('honest', 0.7);
    expect(await output).toEqual({ node: 'honest' });
    expect(m.reserved).toEqual(['honest']);
  });

  it('a node the job must avoid is not reserved on, and when only such nodes bid the answer says so', async () => {
    const avoided = start({ expected: 2, exclude: ['lost-it'] });
    const waiting = avoided.done();
    avoided.bid('lost-it', 0);
    avoided.decline('small');
    expect(await waiting).toEqual({ waiting: expect.stringContaining('failed this job before'), only_avoided: true });
    expect(avoided.reserved).toEqual([]);

    // Another node bid too: that one is taken, and the avoided one never asked.
    const other = start({ expected: 2, exclude: ['lost-it'] });
    const placed = other.done();
    other.bid('lost-it', 0);
    other.bid('fresh', 0.5);
    expect(await placed).toEqual({ node: 'fresh' });
    expect(other.asked).toEqual(['fresh']);

    // Another node bid and then refused to reserve: the job waits, still avoiding the first.
    const refused = start({ expected: 2, exclude: ['lost-it'], refuse: ['fresh'] });
    const still = refused.done();
    refused.bid('lost-it', 0);
    refused.bid('fresh', 0.5);
    expect(await still).toEqual({ waiting: expect.stringContaining('not enough memory') });
  });

  it('with only refused bids the job waits, naming why each was refused', async () => {
    const m = start({ expected: 1, vet: () => 'is not trusted with secrets' });
    const output = m.done();
    m.bid('liar', 0);
    expect(await output).toEqual({ waiting: expect.stringContaining('is not trusted with secrets') });
    expect(m.reserved).toEqual([]);
  });

  it('waits while a busy bidder might still be beaten, and ranks the least loaded first once all have answered', async () => {
    const m = start({ expected: 3 });
    m.bid('busy', 0.5);
    expect(m.state()).toContain('collecting');
    m.decline('small');
    expect(m.state()).toContain('collecting');
    const output = m.done();
    m.bid('quieter', 0.2);
    expect(await output).toEqual({ node: 'quieter' });
    expect(m.reserved).toEqual(['quieter']);
  });

  it('stops at the first idle bidder: no answer still to come can rank above it', async () => {
    const m = start({ expected: 5 });
    m.bid('busy', 0.5);
    expect(m.state()).toContain('collecting');
    const output = m.done();
    m.bid('idle', 0);
    expect(m.state()).toBe('{"bidding":"reserving"}');
    expect(await output).toEqual({ node: 'idle' });
    expect(m.reserved).toEqual(['idle']);
  });

  it("an idle bid that no longer holds the job beside this node's own lease there neither stops the collection nor ranks first", async () => {
    // 'taken' bid idle before this node's reserve of another job there; 'roomy' has room beside everything.
    const m = start({ expected: 3, fits: (node) => node !== 'taken' });
    m.bid('taken', 0);
    expect(m.state()).toContain('collecting');
    const output = m.done();
    m.bid('roomy', 0.4);
    m.decline('small');
    expect(await output).toEqual({ node: 'roomy' });
    expect(m.reserved).toEqual(['roomy']);
  });

  it('such a bid is still asked, after the others, when they refuse', async () => {
    const m = start({ expected: 2, fits: (node) => node !== 'taken', refuse: ['roomy'] });
    const output = m.done();
    m.bid('taken', 0);
    m.bid('roomy', 0.4);
    expect(await output).toEqual({ node: 'taken' });
    expect(m.asked).toEqual(['roomy', 'taken']);
  });

  it('an idle bidder that refuses to reserve after an early stop: the answers still to come are waited for', async () => {
    const m = start({ expected: 3, refuse: ['stale'] });
    m.bid('stale', 0);
    // Its refusal arrives asynchronously; the machine then waits again instead of giving up.
    await new Promise((r) => setTimeout(r, 10));
    expect(m.state()).toContain('collecting');
    const output = m.done();
    m.bid('other', 0.4);
    m.decline('small');
    expect(await output).toEqual({ node: 'other' });
    expect(m.reserved).toEqual(['other']);
  });

  it('an idle bidder that refuses after the last answer came while it was asked: that answer is taken, not dropped', async () => {
    // Jobs offered a few ms apart each meet the same idle bid; the first takes the room, and the
    // second's reservation there is refused. The other node's bid, come meanwhile, must place it.
    const m = start({ expected: 2, refuse: ['taken'] });
    const output = m.done();
    m.bid('taken', 0);
    expect(m.state()).toBe('{"bidding":"reserving"}');
    m.bid('roomy', 0.3);
    expect(await output).toEqual({ node: 'roomy' });
    expect(m.reserved).toEqual(['roomy']);
  });

  it('the window closing while a refusal is pending: with nobody left, the job waits, naming the refusal', async () => {
    const m = start({ expected: 4, refuse: ['stale'] });
    m.bid('stale', 0);
    const output = m.done();
    m.send({ type: 'window_closed' });
    expect(await output).toEqual({ waiting: expect.stringMatching(/stale.*not enough memory/) as unknown });
  });

  it('a fast idle bidder refusing after the window closed: an honest bid arriving late is still taken, without a back-off', async () => {
    const m = start({ expected: 3, refuse: ['liar'] });
    const output = m.done();
    m.bid('liar', 0);
    m.send({ type: 'window_closed' });
    await new Promise((r) => setTimeout(r, 20));
    expect(m.state()).toContain('stragglers');
    m.bid('honest', 0.5);
    expect(await output).toEqual({ node: 'honest' });
    expect(m.reserved).toEqual(['honest']);
  });

  it('only declines when the window closed, a node still to answer: its late bid is taken, without a back-off', async () => {
    // A loaded provider answers after the window (twice the first answer's delay) has closed.
    const m = start({ expected: 3 });
    const output = m.done();
    m.decline('small');
    m.decline('full');
    m.send({ type: 'window_closed' });
    await new Promise((r) => setTimeout(r, 20));
    expect(m.state()).toContain('stragglers');
    m.bid('slow', 0.4);
    expect(await output).toEqual({ node: 'slow' });
    expect(m.reserved).toEqual(['slow']);
  });

  it('only declines, and the last node declines late too: the job waits, naming every decline', async () => {
    const m = start({ expected: 3 });
    const output = m.done();
    m.decline('small');
    m.send({ type: 'window_closed' });
    m.decline('full');
    m.decline('late');
    expect(await output).toEqual({ waiting: expect.stringMatching(/no node can hold it now \(small: .*; full: .*; late: .*\)/) as unknown });
  });

  it('does not stop for an idle bidder that failed a job lately: a later one may rank above it', async () => {
    const m = start({ expected: 5, suspect: ['flaky'] });
    m.bid('flaky', 0);
    expect(m.state()).toContain('collecting');
    const output = m.done();
    m.send({ type: 'window_closed' });
    // Nobody else came: the suspect node is still asked rather than nobody.
    expect(await output).toEqual({ node: 'flaky' });
  });

  it('only a suspect bid when the window closed, others still to answer: their bids are waited for before the suspect is asked', async () => {
    // A liar that never answers a reserve bids at once: its bid closes the window (twice its delay)
    // long before an honest node farther away answers; asked first, it cost every job 5 s.
    const m = start({ expected: 3, suspect: ['liar'] });
    const output = m.done();
    m.bid('liar', 0);
    m.send({ type: 'window_closed' });
    await new Promise((r) => setTimeout(r, 20));
    expect(m.state()).toContain('doubtful');
    m.bid('honest', 0.5);
    expect(await output).toEqual({ node: 'honest' });
    expect(m.reserved).toEqual(['honest']);
  });

  it("only a bid this node's own lease there overtook when the window closed: a slower node's bid is waited for, not a refusal", async () => {
    // test/multinode/placement.test.ts, under CI's load: node 2 bid with room for one of two jobs
    // offered a moment apart, the other job's reserve took it, and node 3 answered after the window.
    const m = start({ expected: 3, fits: (node) => node !== 'taken', refuse: ['taken'] });
    const output = m.done();
    m.bid('taken', 0.2);
    m.send({ type: 'window_closed' });
    await new Promise((r) => setTimeout(r, 20));
    expect(m.state()).toContain('doubtful');
    m.bid('slow', 0.6);
    expect(await output).toEqual({ node: 'slow' });
    expect(m.asked).toEqual(['slow']);
  });

  it('at the window, ranks what came; with no bid at all, says why', async () => {
    const some = start({ expected: 5 });
    some.bid('a', 0.6);
    some.bid('b', 0.3);
    const placed = some.done();
    some.send({ type: 'window_closed' });
    expect(await placed).toEqual({ node: 'b' });

    const none = start({ expected: 5 });
    none.decline('small');
    const waiting = none.done();
    none.send({ type: 'window_closed' });
    expect(await waiting).toEqual({ waiting: expect.stringMatching(/no node can hold it now \(small: too small\)/) as unknown });
  });
});
