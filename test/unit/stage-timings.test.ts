import { describe, expect, it } from 'vitest';
import { StageTimings } from '../../runtime/stage-timings.js';
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
    const t = new StageTimings();
    for (let i = 1; i <= 100; i++) t.record('serve', i);
    t.record('rest.invoke', 2);
    t.record('rest.invoke', 4);
    const [invoke, serve] = t.snapshot();
    expect(invoke).toEqual({ stage: 'rest.invoke', count: 2, mean_ms: 3, p50_ms: 4, p99_ms: 4 });
    expect(serve).toMatchObject({ stage: 'serve', count: 100, mean_ms: 50.5, p50_ms: 51, p99_ms: 100 });
  });

  it('keeps the mean over every sample while quantiles come from the latest 8192', () => {
    const t = new StageTimings();
    for (let i = 0; i < 8192; i++) t.record('net.parse', 1000);
    for (let i = 0; i < 8192; i++) t.record('net.parse', 1);
    expect(t.snapshot()[0]).toMatchObject({ count: 16384, mean_ms: 500.5, p50_ms: 1, p99_ms: 1 });
  });

  it('times a round trip from the request handed to the stream to its reply read, once', () => {
    const t = new StageTimings();
    t.requestSent(envelope('/public/hello', '/private/r/1'));
    t.requestSent(envelope('/public/hello')); // nothing to wait for: not timed
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
    const t = new StageTimings();
    const start = performance.now();
    t.broadcastSent(envelope('/broadcast/hello', '/private/b/1'), start);
    t.broadcastSent(envelope('/broadcast/hello'), start); // no replies wanted: not timed
    for (const after of [1, 2, 3]) t.replyRead(envelope('/private/b/1'), start + after);
    const [replies] = t.snapshot();
    expect(replies).toMatchObject({ stage: 'net.broadcast_reply', count: 3, mean_ms: 2, p50_ms: 2 });
  });

  it('remembers when an envelope arrived, and forgets everything on reset', () => {
    const t = new StageTimings();
    const env = envelope('/x');
    t.arrived(env, 42);
    expect(t.arrivalOf(env)).toBe(42);
    expect(t.arrivalOf(envelope('/x'))).toBeUndefined();
    t.record('serve', 1);
    t.requestSent(envelope('/y', '/private/r/2'));
    t.broadcastSent(envelope('/z', '/private/b/3'), performance.now());
    t.reset();
    t.replyRead(envelope('/private/r/2'), performance.now());
    t.replyRead(envelope('/private/b/3'), performance.now());
    expect(t.snapshot()).toEqual([]);
  });

  it('bounds the requests it waits on: the oldest is forgotten first', () => {
    const t = new StageTimings();
    for (let i = 0; i <= 10_000; i++) t.requestSent(envelope('/b', `/private/r/${i}`));
    t.replyRead(envelope('/private/r/0'), performance.now());
    expect(t.snapshot()).toEqual([]);
    t.replyRead(envelope('/private/r/10000'), performance.now());
    expect(t.snapshot()[0]).toMatchObject({ stage: 'net.round_trip', count: 1 });
  });
});
