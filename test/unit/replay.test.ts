import { appendFileSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { DmsError } from '../../runtime/errors.js';
import { ReplayCache } from '../../runtime/replay.js';
import { ReplayLog } from '../../runtime/replay-log.js';
import { nowNs } from '../../runtime/time.js';
import { removeHome, tempHome } from '../helpers/node.js';

const kindOf = (f: () => unknown): string | undefined => {
  try {
    f();
  } catch (e) {
    return e instanceof DmsError ? `${e.kind}: ${e.message}` : `not a DmsError: ${String(e)}`;
  }
  return undefined;
};

describe('ReplayCache shares', () => {
  it('caps what one sender holds, leaving other senders unaffected', () => {
    const c = new ReplayCache({ capacity: 100, perSender: 3 });
    for (let n = 1n; n <= 3n; n++) c.admit('eve', n, 100n, 0n);
    expect(kindOf(() => c.admit('eve', 4n, 100n, 0n))).toBe(
      'overloaded: sender eve already holds 3 unexpired envelopes in the replay cache (actor.replay_per_sender); retry once some expire',
    );
    c.admit('bob', 1n, 100n, 0n);
    expect(c.held('eve')).toBe(3);
    // Her entries expire, and with them her share comes back.
    c.admit('eve', 4n, 300n, 150n);
    expect(c.held('eve')).toBe(1);
    expect(c.size).toBe(1);
  });

  it('keeps a reserve that only trusted senders may use', () => {
    const c = new ReplayCache({ capacity: 10, perSender: 10, reserve: 3 });
    for (let n = 1n; n <= 7n; n++) c.admit(`k${n}`, n, 100n, 0n);
    expect(kindOf(() => c.admit('stranger', 1n, 100n, 0n))).toBe('overloaded: replay cache is full of unexpired envelopes; retry later');
    for (let n = 1n; n <= 3n; n++) c.admit('operator', n, 100n, 0n, true);
    expect(kindOf(() => c.admit('operator', 4n, 100n, 0n, true))).toBe('overloaded: replay cache is full of unexpired envelopes; retry later');
    expect(c.size).toBe(10);
  });

  it('trusted senders are not held to the per-sender share', () => {
    const c = new ReplayCache({ capacity: 10, perSender: 2 });
    for (let n = 1n; n <= 5n; n++) c.admit('operator', n, 100n, 0n, true);
    expect(c.held('operator')).toBe(5);
  });

  it('refuses a replay from a trusted sender too, and remembers nothing already expired', () => {
    const c = new ReplayCache({ capacity: 10, perSender: 10 });
    c.admit('operator', 1n, 100n, 0n, true);
    expect(kindOf(() => c.admit('operator', 1n, 100n, 10n, true))).toBe('invalid: replayed envelope: this (from.id, nonce) was already delivered');
    c.admit('x', 1n, 5n, 10n);
    expect(c.size).toBe(1);
  });
});

describe('ReplayCache owners', () => {
  const peer = (id: string) => ({ kind: 'peer', id }) as const;

  it('caps a peer whatever from.id it uses; another peer is unaffected, and shares come back as entries expire', () => {
    const c = new ReplayCache({ capacity: 100, perSender: 100, perPeer: 5 });
    for (let n = 1n; n <= 5n; n++) c.admit(`throwaway-${n}`, n, 100n, 0n, peer('P'));
    expect(kindOf(() => c.admit('fresh', 1n, 100n, 0n, peer('P')))).toBe(
      'overloaded: peer P already holds 5 unexpired envelopes in the replay cache (actor.replay_per_peer); retry once some expire',
    );
    c.admit('fresh', 1n, 100n, 0n, peer('Q'));
    expect(c.heldBy(peer('P'))).toBe(5);
    c.admit('fresh', 2n, 300n, 150n, peer('P'));
    expect(c.heldBy(peer('P'))).toBe(1);
    expect(c.heldBy(peer('Q'))).toBe(0);
  });

  it('a replay is refused whoever brings it, and before any share is checked', () => {
    const c = new ReplayCache({ capacity: 100, perSender: 100, perPeer: 1 });
    c.admit('alice', 1n, 100n, 0n, peer('P'));
    expect(kindOf(() => c.admit('alice', 1n, 100n, 0n, peer('Q')))).toMatch(/^invalid: replayed envelope/);
    expect(kindOf(() => c.admit('alice', 1n, 100n, 0n, true))).toMatch(/^invalid: replayed envelope/);
  });

  it('holds what the node signs for REST to its quota, within half the reserve; trusted senders keep the rest', () => {
    const c = new ReplayCache({ capacity: 100, perSender: 100, restQuota: 1000, reserve: 10 });
    expect(c.restQuota).toBe(5);
    for (let n = 1n; n <= 5n; n++) c.admit('operator', n, 100n, 0n, { kind: 'rest-signed' });
    expect(kindOf(() => c.admit('operator', 6n, 100n, 0n, { kind: 'rest-signed' }))).toBe(
      'overloaded: REST envelopes this node signed as the operator already hold 5 unexpired entries in the replay cache (actor.replay_rest_quota); retry once some expire',
    );
    // Peers still have the whole open share, and the operator's signed calls the rest of the reserve.
    for (let n = 1n; n <= 90n; n++) c.admit(`k${n}`, n, 100n, 0n, peer(`p${n}`));
    expect(kindOf(() => c.admit('k91', 91n, 100n, 0n, peer('p91')))).toBe('overloaded: replay cache is full of unexpired envelopes; retry later');
    for (let n = 7n; n <= 11n; n++) c.admit('operator', n, 100n, 0n, true);
    expect(c.size).toBe(100);
  });
});

describe('ReplayLog', () => {
  let home: string | undefined;
  afterEach(() => {
    if (home) removeHome(home);
    home = undefined;
  });
  const pathIn = () => join((home = tempHome('dms-replay-')), 'replay.log');
  const limits = { capacity: 1000, perSender: 1000 };
  const later = (s: number) => nowNs() + BigInt(s) * 1_000_000_000n;

  it('a reopened log refuses what was admitted before, and forgets what expired', () => {
    const path = pathIn();
    const first = ReplayLog.open(path, limits);
    first.admit('alice', 1n, later(60));
    const past = nowNs() - 1_000n;
    first.admit('alice', 2n, past, past - 1n); // live when admitted, expired by the reopen
    first.admit('bob', 7n, later(60), undefined, true);
    // No close(): a killed process leaves what it wrote, and that is enough.
    const second = ReplayLog.open(path, limits);
    expect(second.size).toBe(2);
    expect(kindOf(() => second.admit('alice', 1n, later(60)))).toMatch(/^invalid: replayed envelope/);
    expect(kindOf(() => second.admit('bob', 7n, later(60)))).toMatch(/^invalid: replayed envelope/);
    second.admit('alice', 2n, later(60));
    expect(second.held('alice')).toBe(2);
    second.close();
  });

  it('skips a torn or garbled line instead of refusing to start', () => {
    const path = pathIn();
    const c = ReplayLog.open(path, limits);
    c.admit('alice', 1n, later(60));
    c.close();
    appendFileSync(path, 'garbage\n12 only-two\nnot-a-number alice 3\n' + `${later(60)} alice 4`);
    const reopened = ReplayLog.open(path, limits);
    expect(reopened.size).toBe(2);
    expect(kindOf(() => reopened.admit('alice', 4n, later(60)))).toMatch(/^invalid: replayed envelope/);
    reopened.close();
  });

  it('compacts to the live entries once it has grown past about twice their number', () => {
    const path = pathIn();
    const c = ReplayLog.open(path, limits, { minCompactLines: 10 });
    // 40 entries admitted as of a moment ago that have expired since, then 5 lasting ones:
    // the log keeps only what is live.
    const past = nowNs() - 1_000_000n;
    for (let n = 0n; n < 40n; n++) c.admit('burst', n, past, past - 1n);
    for (let n = 0n; n < 5n; n++) c.admit('steady', n, later(60));
    const lines = readFileSync(path, 'utf8').split('\n').filter(Boolean);
    expect(lines.length).toBeLessThanOrEqual(10);
    c.close();
    const reopened = ReplayLog.open(path, limits);
    expect(reopened.held('steady')).toBe(5);
    expect(reopened.held('burst')).toBe(0);
    reopened.close();
  });

  it('reads a log of the older format (from.id on each line) and rewrites it in the hashed one', () => {
    const path = pathIn();
    writeFileSync(path, `${later(60)} alice 1\n${later(60)} some key with spaces 2\n`);
    const c = ReplayLog.open(path, limits);
    expect(c.size).toBe(2);
    expect(kindOf(() => c.admit('alice', 1n, later(60)))).toMatch(/^invalid: replayed envelope/);
    expect(kindOf(() => c.admit('some key with spaces', 2n, later(60)))).toMatch(/^invalid: replayed envelope/);
    c.admit('alice', 2n, later(60));
    c.close();
    const lines = readFileSync(path, 'utf8').split('\n').filter(Boolean);
    expect(lines).toHaveLength(3);
    for (const line of lines) expect(line).toMatch(/^\d+ ~[0-9a-f]{24} \d+$/);
    expect(readFileSync(path, 'utf8')).not.toContain('alice');
  });

  it('starts empty from a missing file and rewrites an all-expired one', () => {
    const path = pathIn();
    writeFileSync(path, `${nowNs() - 1n} old 1\n`);
    const c = ReplayLog.open(path, limits);
    expect(c.size).toBe(0);
    expect(readFileSync(path, 'utf8')).toBe('');
    c.close();
  });
});
