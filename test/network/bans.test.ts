/** The undecodable-frame policy (runtime/network/bans.ts), in process, on a clock the test moves. */
import { describe, expect, it } from 'vitest';
import { PeerBans, RATE_RESET_STRIKES } from '../../runtime/network/bans.js';

const policy = { maxStrikes: 5, strikeWindowMs: 10_000, banMs: 60_000, warnIntervalMs: 1_000, maxPeers: 3 };

describe('PeerBans', () => {
  it('warns on the first bad frame, then at most once per interval with the count not logged', () => {
    const bans = new PeerBans({ ...policy, maxStrikes: 100 });
    expect(bans.strike('p', 0)).toEqual({ action: 'warn', strikes: 1, suppressed: 0 });
    expect(bans.strike('p', 10)).toEqual({ action: 'quiet' });
    expect(bans.strike('p', 20)).toEqual({ action: 'quiet' });
    expect(bans.strike('p', 1_000)).toEqual({ action: 'warn', strikes: 4, suppressed: 2 });
  });

  it('bans a peer past the bound within the window, for the ban time, quietly after the ban line', () => {
    const bans = new PeerBans(policy);
    for (let t = 0; t < 4; t++) expect(bans.strike('p', t).action).not.toBe('ban');
    expect(bans.strike('p', 4)).toEqual({ action: 'ban', strikes: 5, until: 60_004 });
    expect(bans.isBanned('p', 60_003)).toBe(true);
    expect(bans.strike('p', 100)).toEqual({ action: 'quiet' });
    expect(bans.isBanned('p', 60_004)).toBe(false);
    expect(bans.isBanned('other', 5)).toBe(false);
  });

  it('counts a weighted strike (a stream past its peer’s own rate) as that many bad frames', () => {
    const bans = new PeerBans({ ...policy, maxStrikes: 1_000 });
    for (let i = 0; i < 49; i++) expect(bans.strike('p', i, RATE_RESET_STRIKES).action).not.toBe('ban');
    expect(bans.strike('p', 49, RATE_RESET_STRIKES)).toMatchObject({ action: 'ban', strikes: 50 * RATE_RESET_STRIKES });
  });

  it('does not ban a peer whose bad frames are spread wider than the window', () => {
    const bans = new PeerBans(policy);
    for (let i = 0; i < 20; i++) expect(bans.strike('p', i * 3_000).action).not.toBe('ban');
  });

  it('remembers at most maxPeers peers, dropping the oldest', () => {
    const bans = new PeerBans({ ...policy, maxStrikes: 1 });
    for (const p of ['a', 'b', 'c', 'd']) expect(bans.strike(p, 0).action).toBe('ban');
    expect(['a', 'b', 'c', 'd'].map((p) => bans.isBanned(p, 1))).toEqual([false, true, true, true]);
  });
});
