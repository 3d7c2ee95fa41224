// The job machine's placement states alone: no network, no database, no executor, on a simulated
// clock (vi.useFakeTimers fakes Date.now and the machine's timers alike). The orchestrator's
// effects are recorded; the deployment actor's answers are scripted.
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { createActor, fromPromise } from 'xstate';
import type { ExecutionHandle } from '../../behaviors/jobs/execution.js';
import { jobMachine, type JobMachineInput, type PlaceInput, type PlaceOutcome } from '../../actors/orchestrator/machine.js';

const handle: ExecutionHandle = { executor: 'remote', job_id: 'j', id: 'b' };

/** A job machine whose `place` answers from `answers`, in order; every effect and offer is recorded. */
function job(input: Partial<JobMachineInput>, answers: PlaceOutcome[]) {
  const effects: string[] = [];
  const offers: { exclude: readonly string[]; signal: AbortSignal }[] = [];
  const machine = jobMachine.provide({
    actors: {
      place: fromPromise<PlaceOutcome, PlaceInput>(async ({ input, signal }) => {
        offers.push({ exclude: input.exclude, signal });
        const answer = answers.shift();
        // No answer scripted: the offer is still out (a cancel may stop it).
        return answer ?? new Promise<PlaceOutcome>(() => {});
      }),
    },
    actions: {
      enqueue: () => effects.push('enqueue'),
      dequeue: () => effects.push('dequeue'),
      noteWaiting: (_, { reason }) => effects.push(`waiting(${reason})`),
      placedOn: (_, { node }) => effects.push(`placedOn(${node})`),
      replace: (_, { node, outcome }) => effects.push(`replace(${node}, ${outcome})`),
      finish: (_, { status }) => effects.push(`finish(${status})`),
      persistRunning: () => {},
      watch: () => {},
    },
  });
  const actor = createActor(machine, { input: { jobId: 'j', route: 'here-first', backoff: { firstMs: 1_000, maxMs: 8_000 }, ...input } }).start();
  const states: string[] = [];
  const note = (value: unknown) => {
    const v = typeof value === 'string' ? value : Object.entries(value as object).map(([k, c]) => `${k}.${String(c)}`)[0]!;
    if (states.at(-1) !== v) states.push(v);
  };
  note(actor.getSnapshot().value);
  actor.subscribe((s) => note(s.value));
  const value = () => actor.getSnapshot().value;
  return { actor, effects, offers, states, value, context: () => actor.getSnapshot().context };
}

/** Lets the scripted promise answers arrive (microtasks), moving the clock by `ms`. */
const advance = (ms = 0) => vi.advanceTimersByTimeAsync(ms);

beforeEach(() => {
  // The machine's clock and Date.now simulated; performance.now stays real, to time the test itself.
  vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout', 'Date'] });
});
afterEach(() => {
  vi.useRealTimers();
});

describe('placement as one statechart', () => {
  it('goes queued → offering → unplaced → offering → placed, backing off between offers, within a second', async () => {
    const started = performance.now();
    const j = job({}, [{ waiting: 'no node bid' }, { node: 'b', here: false }]);
    expect(j.value()).toEqual({ pending: 'queued' });
    j.actor.send({ type: 'refused', reason: 'cpu: needs 4 cores, 2 free', peers: 2 });
    expect(j.value()).toEqual({ pending: 'offering' });
    await advance();
    expect(j.value()).toEqual({ pending: 'unplaced' });
    expect(j.context()).toMatchObject({ backoffMs: 1_000 });
    // Offered again once the back-off is over, and not before.
    await advance(999);
    expect(j.value()).toEqual({ pending: 'unplaced' });
    await advance(1);
    expect(j.value()).toEqual('starting');
    expect(j.context()).toMatchObject({ node: 'b', placements: 1, backoffMs: 0 });
    expect(j.states).toEqual(['pending.queued', 'pending.offering', 'pending.unplaced', 'pending.offering', 'starting']);
    expect(j.effects).toEqual(['enqueue', 'dequeue', 'waiting(waiting for a node: no node bid)', 'placedOn(b)']);
    expect(performance.now() - started).toBeLessThan(1_000);
  });

  it('follows a provider lost mid-run: back to pending, that node excluded from the next offer, placed on another', async () => {
    const j = job({ maxAttempts: 3 }, [{ node: 'b', here: false }, { node: 'c', here: false }]);
    j.actor.send({ type: 'refused', reason: 'full', peers: 2 });
    await advance();
    j.actor.send({ type: 'started', handle });
    expect(j.value()).toBe('running');
    j.actor.send({ type: 'fault', reason: 'node b unreachable for 10 s' });
    // Here first again (it may fit now), then the network without b.
    expect(j.value()).toEqual({ pending: 'queued' });
    expect(j.context()).toMatchObject({ node: null, exclude: ['b'], placements: 1 });
    j.actor.send({ type: 'refused', reason: 'full', peers: 2 });
    await advance();
    expect(j.offers.map((o) => o.exclude)).toEqual([[], ['b']]);
    expect(j.value()).toBe('starting');
    expect(j.context()).toMatchObject({ node: 'c', placements: 2 });
    expect(j.effects).toContain('replace(b, lost)');
  });

  it('asks the node it lost again when no other node bids, its placements bounding how often', async () => {
    const j = job({ maxAttempts: 2, route: 'network' }, [
      { node: 'b', here: false },
      { waiting: 'no node can hold it now (b: failed this job before)', only_avoided: true },
      { node: 'b', here: false },
    ]);
    await advance();
    j.actor.send({ type: 'started', handle });
    j.actor.send({ type: 'fault', reason: 'node b unreachable for 10 s' });
    await advance();
    // Avoided at the next offer; only b bid, so b is asked again at the one after, once the back-off is over.
    expect(j.effects).toContain('waiting(waiting for a node: no node can hold it now (b: failed this job before); no other node bid, so those are asked again at its next offer)');
    expect(j.context().exclude).toEqual([]);
    await advance(1_000);
    expect(j.offers.map((o) => o.exclude)).toEqual([[], ['b'], []]);
    expect(j.value()).toBe('starting');
    expect(j.context()).toMatchObject({ node: 'b', placements: 2 });
    // Lost there again with no placement left: it fails naming it, rather than waiting on.
    j.actor.send({ type: 'fault', reason: 'node b unreachable for 10 s' });
    expect(j.value()).toBe('failed');
  });

  it('fails once its placements are used, naming the node that refused the last start', async () => {
    const j = job({ maxAttempts: 1, route: 'network' }, [{ node: 'b', here: false }]);
    await advance();
    expect(j.value()).toBe('starting');
    j.actor.send({ type: 'fault', reason: 'lease expired' });
    expect(j.value()).toBe('failed');
    expect(j.context().error).toBe('node b could not start it: lease expired');
  });

  it('keeps waiting for a node it is pinned to, rather than excluding it', async () => {
    const j = job({ route: 'network', pinned: 'b' }, [{ node: 'b', here: false }, { node: 'b', here: false }]);
    await advance();
    j.actor.send({ type: 'fault', reason: 'refused' });
    await advance();
    expect(j.offers.map((o) => o.exclude)).toEqual([[], []]);
    expect(j.context()).toMatchObject({ node: 'b', placements: 2 });
  });

  it('doubles the wait after each fruitless offer up to its bound', async () => {
    const j = job({ route: 'network' }, Array.from({ length: 6 }, () => ({ waiting: 'no bids' })));
    const waits: number[] = [];
    for (let i = 0; i < 5; i++) {
      await advance();
      waits.push(j.context().backoffMs);
      await advance(j.context().backoffMs);
    }
    expect(waits).toEqual([1_000, 2_000, 4_000, 8_000, 8_000]);
    expect(j.offers).toHaveLength(6);
  });

  it('asks here again when resources are freed, and holds the network offer back until its turn', async () => {
    const j = job({}, [{ waiting: 'no bids' }, { waiting: 'still none' }]);
    j.actor.send({ type: 'refused', reason: 'full', peers: 1 });
    await advance();
    expect(j.value()).toEqual({ pending: 'unplaced' });
    await advance(400);
    j.actor.send({ type: 'resources_freed' });
    expect(j.value()).toEqual({ pending: 'queued' });
    // Still refused here: back to waiting for its turn, not offered at once.
    j.actor.send({ type: 'refused', reason: 'full', peers: 1 });
    expect(j.value()).toEqual({ pending: 'unplaced' });
    expect(j.offers).toHaveLength(1);
    await advance(599);
    expect(j.offers).toHaveLength(1);
    await advance(1);
    expect(j.offers).toHaveLength(2);
    // And granted here once it fits.
    await advance();
    j.actor.send({ type: 'resources_freed' });
    j.actor.send({ type: 'reserved' });
    expect(j.value()).toBe('starting');
    expect(j.context().node).toBeNull();
  });

  it('is offered again at once when a peer joins', async () => {
    const j = job({ route: 'network' }, [{ waiting: 'no bids' }, { node: 'd', here: false }]);
    await advance();
    expect(j.context().backoffMs).toBe(1_000);
    j.actor.send({ type: 'peer_joined' });
    await advance();
    expect(j.value()).toBe('starting');
    expect(j.context().node).toBe('d');
  });

  it('goes back to its queue when this node wins its own offer', async () => {
    const j = job({}, [{ node: 'self', here: true }]);
    j.actor.send({ type: 'refused', reason: 'full', peers: 1 });
    await advance();
    expect(j.value()).toEqual({ pending: 'queued' });
    expect(j.effects).toEqual(['enqueue', 'dequeue', 'enqueue']);
  });

  it('stays queued when there is no peer, or its route keeps it here, saying why it waits', () => {
    const lonely = job({}, []);
    lonely.actor.send({ type: 'refused', reason: 'memory: needs 4 GiB', peers: 0 });
    const kept = job({ route: 'here' }, []);
    kept.actor.send({ type: 'refused', reason: 'memory: needs 4 GiB', peers: 5 });
    for (const j of [lonely, kept]) {
      expect(j.value()).toEqual({ pending: 'queued' });
      expect(j.offers).toHaveLength(0);
      expect(j.effects).toContain('waiting(waiting for resources: memory: needs 4 GiB)');
    }
    // A peer joins: the job refused here with nobody to go to is offered; the one kept here is not.
    lonely.actor.send({ type: 'peer_joined' });
    kept.actor.send({ type: 'peer_joined' });
    expect(lonely.value()).toEqual({ pending: 'offering' });
    expect(kept.value()).toEqual({ pending: 'queued' });
    // Nor is one still waiting for this node's first answer.
    const fresh = job({}, []);
    fresh.actor.send({ type: 'peer_joined' });
    expect(fresh.value()).toEqual({ pending: 'queued' });
  });

  it('forgets a refusal here once it is queued again, whichever way it came back', async () => {
    // Refused here with nobody to go to, then offered when a peer joined: each way back to the
    // queue starts over, so a peer joining does not send it out before this node answers again.
    const refusedThenOffered = (answers: PlaceOutcome[]) => {
      const j = job({}, answers);
      j.actor.send({ type: 'refused', reason: 'full', peers: 0 });
      j.actor.send({ type: 'peer_joined' });
      expect(j.value()).toEqual({ pending: 'offering' });
      return j;
    };
    const wonHere = refusedThenOffered([{ node: 'self', here: true }]);
    const freed = refusedThenOffered([{ waiting: 'no bids' }]);
    const bounced = refusedThenOffered([{ node: 'b', here: false }]);
    await advance();
    freed.actor.send({ type: 'resources_freed' });
    expect(bounced.value()).toBe('starting');
    bounced.actor.send({ type: 'fault', reason: 'image not allowed there' });
    for (const j of [wonHere, freed, bounced]) {
      expect(j.value()).toEqual({ pending: 'queued' });
      expect(j.context().refusedHere).toBe(false);
      j.actor.send({ type: 'peer_joined' });
      expect(j.value()).toEqual({ pending: 'queued' });
    }
  });

  it('a cancel while offering stops the offer (its signal aborts, so a late reservation is let go) and fails the job', async () => {
    const j = job({ route: 'network' }, []);
    await advance();
    expect(j.offers).toHaveLength(1);
    j.actor.send({ type: 'cancel', reason: 'cancelled' });
    expect(j.value()).toBe('failed');
    expect(j.offers[0]!.signal.aborted).toBe(true);
    expect(j.effects).toEqual(['finish(failed)']);
  });

  it('gives back a grant that finds it no longer queued', async () => {
    const gave: string[] = [];
    const machine = jobMachine.provide({ actions: { giveBack: () => gave.push('giveBack') } });
    const actor = createActor(machine, { input: { jobId: 'j', route: 'network' } }).start();
    actor.send({ type: 'reserved' });
    expect(actor.getSnapshot().value).toEqual({ pending: 'offering' });
    expect(gave).toEqual(['giveBack']);
    actor.stop();
  });

  it('waits in recovering, placing nothing, until recovery says what it found', () => {
    const j = job({ recovering: true, route: 'network' }, []);
    expect(j.value()).toEqual({ pending: 'recovering' });
    expect(j.offers).toHaveLength(0);
    expect(j.effects).toEqual([]);
    j.actor.send({ type: 'reattached', handle, node: 'b' });
    expect(j.value()).toBe('running');
  });
});
