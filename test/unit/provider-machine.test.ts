/**
 * The provider's deployment machine alone (no network, no resource manager): each reserve and
 * start check is a guard that refuses with its reason and leaves the state as it was, and the
 * lease is the machine's own `after`, which ends it unstarted and gives the share back. The
 * bid book and the strikes that feed its guards are checked beside it.
 */
import { describe, expect, it, vi } from 'vitest';
import { createActor } from 'xstate';
import { BidBook } from '../../actors/deployment/bid-book.js';
import { type ProviderEvent, type ProviderInput, providerMachine } from '../../actors/deployment/provider-machine.js';
import { Strikes } from '../../actors/deployment/strikes.js';

const MiB = 1024 * 1024;
const spec = (cores: number, memory: number) => ({ cpu: { cores }, memory: { size: memory }, storage: { size: 0 } });
const share = { offered: true, offering: spec(1, 1024 * MiB) };
const none = { count: 0, others: 0, cores: 0, memory: 0 };

function machine(input: Partial<ProviderInput> = {}) {
  const returned: string[] = [];
  const abandoned: string[] = [];
  const actions = { returnShare: ({ context }: { context: { jobId: string } }) => void returned.push(context.jobId), abandon: ({ context }: { context: { jobId: string } }) => void abandoned.push(context.jobId) };
  const actor = createActor(providerMachine.provide({ actions }), {
    input: {
      jobId: 'j',
      requester: 'R',
      bid: { resources: spec(0.5, 64 * MiB), validMs: 15_000 },
      limits: { leaseMs: 2_000, leaseShare: 0.25, maxLeases: 2 },
      ...input,
    },
  });
  actor.start();
  return { actor, returned, abandoned };
}

const reserve = (over: Partial<Extract<ProviderEvent, { type: 'reserve' }>> = {}): ProviderEvent => ({
  type: 'reserve',
  requester: 'R',
  resources: spec(0.5, 64 * MiB),
  here: false,
  share,
  holding: none,
  barred: null,
  ...over,
});

describe('the deployment machine', () => {
  it("counts an ensemble's other leases here as one reservation with this one: past the share, but not past the count", () => {
    // One unstarted lease of the same ensemble (others 0): the share bound does not apply, as to a first lease.
    const same = machine({ group: 'e' });
    same.actor.send(reserve({ holding: { count: 1, others: 0, cores: 0.25, memory: 64 * MiB } }));
    expect(same.actor.getSnapshot().context.refusal).toBeNull();
    // The bound on how many stays, whatever ensemble they are of.
    const many = machine({ group: 'e' });
    many.actor.send(reserve({ holding: { count: 2, others: 0, cores: 0.02, memory: 12 * MiB } }));
    expect(many.actor.getSnapshot().context.refusal?.message).toContain('holds 2 reservations here not yet started');
  });

  it('does not count a reserve carrying its start against the unstarted bounds, whose other checks still apply', () => {
    // Found with 32 callers placing on one provider: each reserve of the burst was counted as an
    // unstarted lease while the provider leased and started it, and 1.5 refusals a job came back.
    const over = [{ count: 2, others: 0, cores: 0.02, memory: 12 * MiB }, { count: 1, others: 1, cores: 0.25, memory: 64 * MiB }];
    for (const holding of over) {
      const carried = machine({ startCarried: true });
      carried.actor.send(reserve({ holding }));
      expect(carried.actor.getSnapshot().context.refusal).toBeNull();
      expect(carried.actor.getSnapshot().value).toBe('leasing');
      const bare = machine();
      bare.actor.send(reserve({ holding }));
      expect(bare.actor.getSnapshot().context.refusal?.kind).toBe('overloaded');
    }
    const barred = machine({ startCarried: true });
    barred.actor.send(reserve({ barred: 'your node let reservations here go unstarted' }));
    expect(barred.actor.getSnapshot().context.refusal?.message).toContain('go unstarted');
    const larger = machine({ startCarried: true });
    larger.actor.send(reserve({ resources: spec(1, 64 * MiB) }));
    expect(larger.actor.getSnapshot().context.refusal?.message).toContain('more than job j was offered with');
  });

  it('refuses a reserve by each of its guards, naming why, and stays offered', () => {
    const cases: [Partial<Extract<ProviderEvent, { type: 'reserve' }>>, string][] = [
      [{ share: { offered: false, offering: share.offering } }, 'offers nothing to the network'],
      [{ requester: 'X' }, 'was offered here by another node'],
      [{ barred: 'your node let reservations here go unstarted' }, 'go unstarted'],
      [{ resources: spec(1, 64 * MiB) }, 'more than job j was offered with'],
      [{ holding: { count: 2, others: 0, cores: 0.02, memory: 12 * MiB } }, 'holds 2 reservations here not yet started'],
      [{ holding: { count: 1, others: 1, cores: 0.25, memory: 64 * MiB } }, 'more than 25% of its share'],
    ];
    for (const [event, why] of cases) {
      const { actor } = machine();
      actor.send(reserve(event));
      expect(actor.getSnapshot().value).toBe('offered');
      expect(actor.getSnapshot().context.refusal?.message).toContain(why);
    }
    const unbid = machine({ bid: null });
    unbid.actor.send(reserve());
    expect(unbid.actor.getSnapshot().context.refusal?.message).toBe('this node did not bid for job j lately: ask it with /dms/deployment/bid first');
  });

  it('leases, refuses a start larger than the lease, by another node or mounting a volume, and starts within it', () => {
    const { actor } = machine();
    actor.send(reserve());
    expect(actor.getSnapshot().value).toBe('leasing');
    actor.send({ type: 'leased', until: 'u', resources: spec(0.5, 64 * MiB) });
    actor.send({ type: 'start', requester: 'X', resources: spec(0.5, 64 * MiB), here: false, volumes: [] });
    expect(actor.getSnapshot().context.refusal?.kind).toBe('conflict');
    actor.send({ type: 'start', requester: 'R', resources: spec(2, 8 * 1024 * MiB), here: false, volumes: [] });
    expect(actor.getSnapshot().context.refusal).toMatchObject({ kind: 'invalid', message: expect.stringContaining('more than its reservation here holds') });
    actor.send({ type: 'start', requester: 'R', resources: spec(0.5, 64 * MiB), here: false, volumes: ['data'] });
    expect(actor.getSnapshot().context.refusal).toEqual({ kind: 'forbidden', message: "inputs: volume:data is this node's own: a job of another node's cannot mount a volume" });
    expect(actor.getSnapshot().value).toBe('reserved');
    actor.send({ type: 'start', requester: 'R', resources: spec(0, 0), here: false, volumes: [] });
    expect(actor.getSnapshot().value).toBe('starting');
    actor.send({ type: 'accepted' });
    actor.send({ type: 'ended' });
    expect(actor.getSnapshot().status).toBe('done');
  });

  it('gives the share back after a start the node refused, striking the requester only when the job was at fault', () => {
    const started = (end: 'start_failed' | 'start_deferred') => {
      const m = machine();
      m.actor.send(reserve());
      m.actor.send({ type: 'leased', until: 'u', resources: spec(0.5, 64 * MiB) });
      m.actor.send({ type: 'start', requester: 'R', resources: spec(0.5, 64 * MiB), here: false, volumes: [] });
      m.actor.send({ type: end });
      return { snap: m.actor.getSnapshot(), returned: m.returned };
    };
    // Refused for what the job is (the requester's doing): an unstarted lease, a strike.
    expect(started('start_failed')).toMatchObject({ snap: { value: 'released', context: { unstarted: 'released' } }, returned: ['j'] });
    // Not now (its run here before still stopping, the node stopping): no fault of the requester's.
    expect(started('start_deferred')).toMatchObject({ snap: { value: 'released', context: { unstarted: null } }, returned: ['j'] });
  });

  it('stops a job its holder released after asking to start it, once it runs, and only for its holder', () => {
    const started = () => {
      const m = machine();
      m.actor.send(reserve());
      m.actor.send({ type: 'leased', until: 'u', resources: spec(0.5, 64 * MiB) });
      m.actor.send({ type: 'start', requester: 'R', resources: spec(0.5, 64 * MiB), here: false, volumes: [] });
      return m;
    };
    // Released while the orchestrator takes it: stopped as soon as it is accepted.
    const early = started();
    early.actor.send({ type: 'release', requester: 'X' });
    expect(early.actor.getSnapshot().context).toMatchObject({ abandoned: false, refusal: { kind: 'conflict' } });
    early.actor.send({ type: 'release', requester: 'R' });
    expect(early.abandoned).toEqual([]);
    early.actor.send({ type: 'accepted' });
    expect(early.actor.getSnapshot().value).toBe('running');
    expect(early.abandoned).toEqual(['j']);
    // Released while it runs: stopped at once, and once however often it is released.
    const late = started();
    late.actor.send({ type: 'accepted' });
    late.actor.send({ type: 'release', requester: 'X' });
    expect(late.abandoned).toEqual([]);
    late.actor.send({ type: 'release', requester: 'R' });
    late.actor.send({ type: 'release', requester: 'R' });
    expect(late.abandoned).toEqual(['j']);
    // Its share goes back when it ends, as for any job that ran.
    expect(late.returned).toEqual([]);
  });

  it('lets a lease go once granted when its holder released it while it was being leased', () => {
    const m = machine();
    m.actor.send(reserve());
    m.actor.send({ type: 'release', requester: 'X' });
    expect(m.actor.getSnapshot().context).toMatchObject({ abandoned: false, refusal: { kind: 'conflict' } });
    m.actor.send({ type: 'release', requester: 'R' });
    expect(m.actor.getSnapshot().value).toBe('leasing');
    m.actor.send({ type: 'leased', until: 'u', resources: spec(0.5, 64 * MiB) });
    expect(m.actor.getSnapshot().status).toBe('done');
    // Released, not run out: one strike, and the share back at once.
    expect(m.actor.getSnapshot().context.unstarted).toBe('released');
    expect(m.returned).toEqual(['j']);
  });

  it("starts this node's own job mounting a volume (an ensemble's part placed here): the volume is its own", () => {
    const { actor } = machine();
    actor.send(reserve({ here: true }));
    actor.send({ type: 'leased', until: 'u', resources: spec(0.5, 64 * MiB) });
    actor.send({ type: 'start', requester: 'R', resources: spec(0.5, 64 * MiB), here: true, volumes: ['data'] });
    expect(actor.getSnapshot().context.refusal).toBeNull();
    expect(actor.getSnapshot().value).toBe('starting');
  });

  it('ends an unstarted lease at its bound, never renewed by asking again, and gives the share back', () => {
    vi.useFakeTimers();
    try {
      const { actor, returned } = machine();
      actor.send(reserve());
      actor.send({ type: 'leased', until: 'u', resources: spec(0.5, 64 * MiB) });
      vi.advanceTimersByTime(1_500);
      // Asked again by its holder: the same lease, whose clock goes on.
      actor.send(reserve());
      expect(actor.getSnapshot()).toMatchObject({ value: 'reserved', context: { refusal: null, until: 'u' } });
      vi.advanceTimersByTime(600);
      expect(actor.getSnapshot().status).toBe('done');
      expect(actor.getSnapshot().context.unstarted).toBe('expired');
      expect(returned).toEqual(['j']);
    } finally {
      vi.useRealTimers();
    }
  });
});

describe('the bid book', () => {
  it('keeps a bid for its window, drops a requester’s oldest past its bound, and the largest requester’s oldest past the total', () => {
    const book = new BidBook({ validMs: 1_000, perRequester: 2, total: 3 });
    const r = spec(0.1, MiB);
    book.record('a1', 'A', r, 0);
    book.record('a2', 'A', r, 1);
    book.record('a3', 'A', r, 2);
    expect(book.take('a1', 3)).toBeNull();
    expect(book.take('a2', 3)?.bid.requester).toBe('A');
    book.record('b1', 'B', r, 4);
    book.record('c1', 'C', r, 5);
    // Four bids past a total of three: the oldest of A (the requester with most) goes.
    expect(book.size).toBe(3);
    expect(book.take('a2', 6)).toBeNull();
    expect(book.take('b1', 6)?.validMs).toBe(998);
    expect(book.take('b1', 1_004)).toBeNull();
  });

  it("sums what one requester's recent bids would hold, leaving out older ones, other requesters' and the jobs asked about again", () => {
    const book = new BidBook({ validMs: 15_000, perRequester: 16, total: 64 });
    book.record('old', 'A', spec(1, 100 * MiB), 0);
    book.record('a1', 'A', spec(0.5, 600 * MiB), 900);
    book.record('a2', 'A', spec(0.25, 10 * MiB), 950);
    book.record('b1', 'B', spec(2, 2 * 1024 * MiB), 950);
    expect(book.recentFor('A', 1_000, new Set(), 1_000)).toEqual({ cores: 0.75, memory: 610 * MiB });
    expect(book.recentFor('A', 1_000, new Set(['a2']), 1_000)).toEqual({ cores: 0.5, memory: 600 * MiB });
    expect(book.recentFor('C', 1_000, new Set(), 1_000)).toEqual({ cores: 0, memory: 0 });
    // Reserved (forgotten here, held by the resource manager from then on): no longer counted.
    book.forget('a1');
    expect(book.recentFor('A', 1_000, new Set(), 1_000)).toEqual({ cores: 0.25, memory: 10 * MiB });
  });
});

describe('strikes', () => {
  it('bar a requester once it reaches the bound in the window, until the oldest leaves it', () => {
    const strikes = new Strikes({ windowMs: 60_000, bar: 4, maxRequesters: 10 });
    for (let i = 0; i < 3; i++) strikes.strike('R', 1, i * 1_000);
    expect(strikes.barred('R', 3_000)).toBeNull();
    strikes.strike('R', 1, 3_000);
    expect(strikes.barred('R', 3_000)).toMatch(/it may reserve here again in 57 s$/);
    expect(strikes.barred('R', 60_001)).toBeNull();
    // A lease run out counts as the whole bound.
    strikes.strike('S', 4, 0);
    expect(strikes.barred('S', 59_000)).not.toBeNull();
    expect(strikes.barred('other', 0)).toBeNull();
  });
});
