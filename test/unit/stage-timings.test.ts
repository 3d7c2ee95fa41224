import { describe, expect, it, onTestFinished } from 'vitest';
import { stageChannel, stageEnd, stageMark, stageStart, StageTimings } from '../../runtime/stage-timings.js';
import type { Envelope } from '../../runtime/wire/envelope.js';

const envelope = (be: string, cont?: string): Envelope => ({
  to: { id: '', did: '', addr: { host: 'h', inbox: 'root' } },
  be,
  from: { id: '', did: '', addr: { host: 'h', inbox: 'x' } },
  nonce: 1n,
  opt: { exp: 1n, ...(cont ? { cont } : {}) },
  msg: new Uint8Array(),
});

describe('StageTimings', () => {
  it('reports count, mean and quantiles per stage, in path order whatever the recording order', () => {
    const t = new StageTimings('h');
    for (let i = 1; i <= 100; i++) t.record('serve', i);
    t.record('rest.invoke', 2);
    t.record('rest.invoke', 4);
    const [invoke, serve] = t.snapshot();
    expect(invoke).toEqual({ stage: 'rest.invoke', count: 2, mean_ms: 3, p50_ms: 4, p99_ms: 4 });
    expect(serve).toMatchObject({ stage: 'serve', count: 100, mean_ms: 50.5, p50_ms: 51, p99_ms: 100 });
  });

  it('keeps the mean over every sample while quantiles come from the latest 8192', () => {
    const t = new StageTimings('h');
    for (let i = 0; i < 8192; i++) t.record('net.parse', 1000);
    for (let i = 0; i < 8192; i++) t.record('net.parse', 1);
    expect(t.snapshot()[0]).toMatchObject({ count: 16384, mean_ms: 500.5, p50_ms: 1, p99_ms: 1 });
  });

  it('times a round trip from the request handed to the stream to its reply read, once', () => {
    const t = new StageTimings('h');
    t.requestSent(envelope('/public/hello', '/private/r/1'), performance.now());
    t.requestSent(envelope('/public/hello'), performance.now()); // nothing to wait for: not timed
    const reply = envelope('/private/r/1');
    t.replyRead(reply, performance.now() + 5);
    t.replyRead(reply, performance.now() + 50); // a second reply to the same cont is no round trip
    t.replyRead(envelope('/private/r/unknown'), performance.now());
    const [trip] = t.snapshot();
    expect(trip.stage).toBe('net.round_trip');
    expect(trip.count).toBe(1);
    expect(trip.mean_ms).toBeGreaterThanOrEqual(5);
    expect(trip.mean_ms).toBeLessThan(50);
  });

  it('times every reply to a broadcast from its publication', () => {
    const t = new StageTimings('h');
    const start = performance.now();
    t.broadcastSent(envelope('/broadcast/hello', '/private/b/1'), start);
    t.broadcastSent(envelope('/broadcast/hello'), start); // no replies wanted: not timed
    for (const after of [1, 2, 3]) t.replyRead(envelope('/private/b/1'), start + after);
    const [replies] = t.snapshot();
    expect(replies).toMatchObject({ stage: 'net.broadcast_reply', count: 3, mean_ms: 2, p50_ms: 2 });
  });

  it('remembers when an envelope arrived, and forgets everything on reset', () => {
    const t = new StageTimings('h');
    const env = envelope('/x');
    t.arrived(env, 42);
    expect(t.arrivalOf(env)).toBe(42);
    expect(t.arrivalOf(envelope('/x'))).toBeUndefined();
    t.record('serve', 1);
    t.requestSent(envelope('/y', '/private/r/2'), performance.now());
    t.broadcastSent(envelope('/z', '/private/b/3'), performance.now());
    t.reset();
    t.replyRead(envelope('/private/r/2'), performance.now());
    t.replyRead(envelope('/private/b/3'), performance.now());
    expect(t.snapshot()).toEqual([]);
  });

  it('bounds the requests it waits on: the oldest is forgotten first', () => {
    const t = new StageTimings('h');
    for (let i = 0; i <= 10_000; i++) t.requestSent(envelope('/b', `/private/r/${i}`), performance.now());
    t.replyRead(envelope('/private/r/0'), performance.now());
    expect(t.snapshot()).toEqual([]);
    t.replyRead(envelope('/private/r/10000'), performance.now());
    expect(t.snapshot()[0]).toMatchObject({ stage: 'net.round_trip', count: 1 });
  });
});

describe('the dms:stage channel', () => {
  it('costs the path nothing but a check while nobody subscribes, and feeds each node its own stages while one does', () => {
    expect(stageChannel.hasSubscribers).toBe(false);
    expect(stageStart()).toBeUndefined();
    const a = new StageTimings('node-a').attach();
    const b = new StageTimings('node-b').attach();
    onTestFinished(() => {
      a.detach();
      b.detach();
    });
    const start = stageStart();
    expect(start).toBeTypeOf('number');
    stageEnd('node-a', 'net.parse', start! - 3);
    stageEnd('node-b', 'mailbox.wait', start);
    stageEnd('node-a', 'kernel.verify', undefined); // begun while nobody timed: nothing
    expect(a.snapshot().map((f) => f.stage)).toEqual(['net.parse']);
    expect(a.snapshot()[0].mean_ms).toBeGreaterThanOrEqual(3);
    expect(b.snapshot().map((f) => f.stage)).toEqual(['mailbox.wait']);

    // A request's frame read, then its reply handed on: the peer's share of a round trip.
    const request = envelope('/public/hello', '/private/r/9');
    stageMark('node-a', 'frame_read', request, performance.now() - 7);
    stageMark('node-a', 'served', request, performance.now());
    stageMark('node-b', 'served', request, performance.now()); // never read by node-b: no serve
    expect(a.snapshot().find((f) => f.stage === 'serve')?.mean_ms).toBeGreaterThanOrEqual(7);
    expect(b.snapshot().find((f) => f.stage === 'serve')).toBeUndefined();

    a.detach();
    b.detach();
    expect(stageChannel.hasSubscribers).toBe(false);
    expect(stageStart()).toBeUndefined();
    stageEnd('node-a', 'net.parse', 0);
    expect(a.snapshot().find((f) => f.stage === 'net.parse')?.count).toBe(1);
  });
});
