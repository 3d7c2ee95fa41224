import type { Stream } from '@libp2p/interface';
import { describe, expect, it } from 'vitest';
import { FairIntake, type FairIntakeOptions } from '../../runtime/network/fair-intake.js';

/** The part of a libp2p stream the intake uses: its read status, paused and resumed. */
function fakeStream(): Stream & { pauses: number; resumes: number } {
  const s = {
    readStatus: 'readable',
    pauses: 0,
    resumes: 0,
    pause() {
      s.readStatus = 'paused';
      s.pauses++;
    },
    resume() {
      s.readStatus = 'readable';
      s.resumes++;
    },
  };
  return s as unknown as Stream & { pauses: number; resumes: number };
}

const frame = (n = 100) => new Uint8Array(n);
/** Until every turn the intake scheduled has run (each is one setImmediate). */
const settle = async (turns = 50) => {
  for (let i = 0; i < turns; i++) await new Promise((r) => setImmediate(r));
};

function intake(opts: Partial<FairIntakeOptions> = {}) {
  const order: string[] = [];
  const fair = new FairIntake({ deliver: (_f, peer) => void order.push(peer), ...opts });
  return { fair, order };
}

describe('FairIntake', () => {
  it('hands on one frame per peer in turn, however many one peer has waiting', async () => {
    const { fair, order } = intake();
    const s = fakeStream();
    for (let i = 0; i < 100; i++) fair.push('flooder', 'h1', s, frame(), undefined);
    for (let i = 0; i < 3; i++) fair.push('honest', 'h2', fakeStream(), frame(), undefined);
    await settle();
    expect(order).toHaveLength(103);
    // The honest peer's three are among the first six, alternating with the flooder's.
    expect(order.slice(0, 6)).toEqual(['flooder', 'honest', 'flooder', 'honest', 'flooder', 'honest']);
  });

  it('takes hosts in turn before peers: many identities on one host share one turn', async () => {
    const { fair, order } = intake();
    for (const peer of ['a', 'b', 'c']) for (let i = 0; i < 50; i++) fair.push(peer, 'sybil-host', fakeStream(), frame(), undefined);
    for (let i = 0; i < 50; i++) fair.push('honest', 'other-host', fakeStream(), frame(), undefined);
    await settle();
    expect(order).toHaveLength(200);
    const first = order.slice(0, 40);
    expect(first.filter((p) => p === 'honest')).toHaveLength(20);
    // Within the host, its identities in turn.
    expect(first.filter((p) => p !== 'honest')).toEqual(Array.from({ length: 20 }, (_, i) => ['a', 'b', 'c'][i % 3]));
  });

  it('passes over a peer with its bound of envelopes in flight until one is admitted', async () => {
    const held: (() => void)[] = [];
    const order: string[] = [];
    const fair = new FairIntake({
      maxInFlight: 4,
      deliver: (_f, peer) => {
        order.push(peer);
        if (peer === 'slow') return new Promise<void>((r) => held.push(r));
      },
    });
    for (let i = 0; i < 10; i++) fair.push('slow', 'h1', fakeStream(), frame(), undefined);
    for (let i = 0; i < 10; i++) fair.push('quick', 'h2', fakeStream(), frame(), undefined);
    await settle();
    expect(order.filter((p) => p === 'slow')).toHaveLength(4);
    expect(order.filter((p) => p === 'quick')).toHaveLength(10);
    expect(fair.of('slow')).toMatchObject({ waiting: 6, inFlight: 4 });
    held.shift()!();
    await settle();
    expect(order.filter((p) => p === 'slow')).toHaveLength(5);
    // A rejected admission frees its place as a resolved one does.
    while (held.length) held.shift()!();
    await settle();
    while (held.length) held.shift()!();
    await settle();
    expect(order.filter((p) => p === 'slow')).toHaveLength(10);
  });

  it("pauses a peer's stream past its bound, after the read that brought the frame, and resumes it at half", async () => {
    const deliveries: (() => void)[] = [];
    const fair = new FairIntake({ pauseFrames: 10, pauseBytes: 1e9, maxInFlight: 1, deliver: () => new Promise<void>((r) => deliveries.push(r)) });
    const s = fakeStream();
    for (let i = 0; i < 11; i++) fair.push('p', 'h', s, frame(), undefined);
    // Not within the push: yamux would credit a stream paused inside a resume's read.
    expect(s.readStatus).toBe('readable');
    await Promise.resolve();
    expect(s).toMatchObject({ readStatus: 'paused', pauses: 1 });
    for (let i = 0; i < 5; i++) fair.push('p', 'h', s, frame(), undefined);
    await Promise.resolve();
    expect(s.pauses).toBe(1);
    // 16 waiting: one handed on at a time; resumed once at most 5 wait.
    for (let handed = 1; handed <= 11; handed++) {
      await settle(2);
      deliveries.shift()?.();
      if (handed < 11) expect(s.resumes, `after ${handed} handed on`).toBe(0);
    }
    await settle(2);
    expect(s).toMatchObject({ readStatus: 'readable', resumes: 1 });
  });

  it('pauses on bytes as on frames', async () => {
    const { fair } = intake({ pauseBytes: 1000 });
    const s = fakeStream();
    fair.push('p', 'h', s, frame(600), undefined);
    fair.push('p', 'h', s, frame(600), undefined);
    await Promise.resolve();
    expect(s.readStatus).toBe('paused');
    await settle();
    expect(s.readStatus).toBe('readable');
  });

  it('pauses any stream that brings more while every peer together has its total waiting, and resumes them at half', async () => {
    const held: (() => void)[] = [];
    const fair = new FairIntake({ totalBytes: 1000, maxInFlight: 1, deliver: () => new Promise<void>((r) => held.push(r)) });
    const [a, b, c] = [fakeStream(), fakeStream(), fakeStream()];
    for (let i = 0; i < 6; i++) fair.push('a', 'h1', a, frame(100), undefined);
    for (let i = 0; i < 6; i++) fair.push('b', 'h2', b, frame(100), undefined);
    await Promise.resolve();
    expect([a.readStatus, b.readStatus]).toEqual(['readable', 'paused']);
    // Within its own bound, a third peer's one frame is paused too while the total is past.
    fair.push('c', 'h3', c, frame(10), undefined);
    await Promise.resolve();
    expect(c.readStatus).toBe('paused');
    // Handed on one at a time per peer: at half the total (500) every paused stream goes on.
    while (fair.waiting > 0 && [b, c].some((s) => s.readStatus === 'paused')) {
      await settle(2);
      held.splice(0).forEach((r) => r());
    }
    expect([b.readStatus, c.readStatus]).toEqual(['readable', 'readable']);
    expect(fair.waiting).toBeGreaterThan(0);
    await settle(2);
  });

  it('yields to the event loop between turns', async () => {
    const busy = (ms: number) => {
      const end = performance.now() + ms;
      while (performance.now() < end);
    };
    let handed = 0;
    const fair = new FairIntake({ turnMs: 2, deliver: () => void (handed++, busy(0.5)) });
    for (let i = 0; i < 200; i++) fair.push('p', 'h', fakeStream(), frame(), undefined);
    // A timer set now runs between two turns, long before 200 × 0.5 ms of frames are through.
    const atTimer = await new Promise<number>((r) => setTimeout(() => r(handed), 0));
    expect(atTimer).toBeGreaterThan(0);
    expect(atTimer).toBeLessThan(50);
    await settle(200);
    expect(handed).toBe(200);
  });

  it('hands on nothing more of a dropped peer, nor anything after stop', async () => {
    const { fair, order } = intake();
    for (let i = 0; i < 5; i++) fair.push('banned', 'h', fakeStream(), frame(), undefined);
    fair.push('other', 'h2', fakeStream(), frame(), undefined);
    fair.drop('banned');
    await settle();
    expect(order).toEqual(['other']);
    expect(fair.waiting).toBe(0);
    fair.stop();
    fair.push('other', 'h2', fakeStream(), frame(), undefined);
    await settle();
    expect(order).toEqual(['other']);
  });

  it('keeps handing on when deliver throws', async () => {
    let n = 0;
    const fair = new FairIntake({
      deliver: () => {
        if (n++ === 0) throw new Error('boom');
      },
    });
    for (let i = 0; i < 3; i++) fair.push('p', 'h', fakeStream(), frame(), undefined);
    await settle();
    expect(n).toBe(3);
  });
});
