/**
 * What a node does about a peer that sends it frames it cannot decode, or streams past its own
 * rates (RATE_RESET_STRIKES) (README "Network"): one warning, then at most one a minute saying
 * how many were not written, and past a bound in a window the peer is disconnected and refused
 * for a while. The bound is a rate, not a count:
 * a peer whose stream carries the odd bad frame among good ones (a bug, a version skew) keeps
 * being answered, while one writing garbage in a loop is cut off within a fraction of a second.
 * With warnings rate-limited a bad frame costs a decode attempt only.
 */
import { rememberNewest } from '../bounded-map.js';
import { LogGate } from '../log.js';

export interface BanPolicy {
  /** Undecodable frames within `strikeWindowMs` that get a peer banned. */
  maxStrikes: number;
  strikeWindowMs: number;
  /** How long a banned peer is disconnected and refused, in ms. */
  banMs: number;
  /** Least time between two warnings about one peer, in ms. */
  warnIntervalMs: number;
  /** Most peers remembered (strikes and bans each); past it the oldest goes first. */
  maxPeers: number;
}

/**
 * What a stream reset past its peer's own rate (DHT messages, pings) counts for, in undecodable
 * frames: 50 such streams within the strike window get the peer banned. A ping flooder opening
 * stream after stream (86 a second) otherwise cost the node 0.28 of a core for as long as it
 * went on; an honest peer stays within its rates, and one past only its host's is not struck.
 */
export const RATE_RESET_STRIKES = 20;

export const DEFAULT_BAN_POLICY: BanPolicy = {
  maxStrikes: 1_000,
  strikeWindowMs: 10_000,
  banMs: 10 * 60_000,
  warnIntervalMs: 60_000,
  maxPeers: 4096,
};

/** What to do about one more undecodable frame from a peer. */
export type Strike =
  | { action: 'quiet' }
  /** Log it, with how many were not logged since the last warning. */
  | { action: 'warn'; strikes: number; suppressed: number }
  /** Log the ban once, disconnect the peer; it is refused until `until` (ms since the epoch). */
  | { action: 'ban'; strikes: number; until: number };

interface PeerRecord {
  strikes: number;
  since: number;
  /** Kept across strike windows: the warning interval is the peer's, not the window's. */
  warnings: LogGate;
}

export class PeerBans {
  private readonly records = new Map<string, PeerRecord>();
  private readonly bans = new Map<string, number>();

  constructor(readonly policy: BanPolicy = DEFAULT_BAN_POLICY) {}

  /** One more strike against `peer`, worth `weight` undecodable frames. */
  strike(peer: string, now = Date.now(), weight = 1): Strike {
    if (this.isBanned(peer, now)) return { action: 'quiet' };
    let r = this.records.get(peer);
    if (!r || now - r.since > this.policy.strikeWindowMs) {
      r = { strikes: 0, since: now, warnings: r?.warnings ?? new LogGate(this.policy.warnIntervalMs) };
      rememberNewest(this.records, peer, r, this.policy.maxPeers);
    }
    r.strikes += weight;
    if (r.strikes >= this.policy.maxStrikes) {
      const until = now + this.policy.banMs;
      this.records.delete(peer);
      rememberNewest(this.bans, peer, until, this.policy.maxPeers);
      return { action: 'ban', strikes: r.strikes, until };
    }
    const suppressed = r.warnings.pass(now);
    if (suppressed === undefined) return { action: 'quiet' };
    return { action: 'warn', strikes: r.strikes, suppressed };
  }

  isBanned(peer: string, now = Date.now()): boolean {
    const until = this.bans.get(peer);
    if (until === undefined) return false;
    if (now < until) return true;
    this.bans.delete(peer);
    return false;
  }
}
