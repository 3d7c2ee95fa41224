/**
 * Pings of a peer share one stream. libp2p lets a connection open only a few outbound ping
 * streams (./host.ts: PING_STREAMS), and its connection monitor pings every connection on the
 * same protocol: a ping it cannot open fails, and a failed monitor ping aborts the connection.
 * So however many callers ping a peer at once (REST `dms peers ping`, a bid's round trip), this
 * node has one ping of it in flight. The shared ping lasts as long as its longest-waiting caller
 * asked; each caller still gives up at its own bound.
 */
import { settledWithin } from '../deadline.js';
import { DmsError } from '../errors.js';

interface SharedPing {
  result: Promise<number>;
  /** When the ping gives up (ms since the epoch): pushed later by a caller that waits longer. */
  until: number;
}

export class SharedPings {
  private readonly inFlight = new Map<string, SharedPing>();

  /** `ping(signal)` sends one ping; `signal` aborts once every caller's bound has passed. */
  constructor(private readonly ping: (peer: string, signal: AbortSignal) => Promise<number>) {}

  /** The round trip to `peer` in ms; rejects when the ping fails or `timeoutMs` passes first. */
  async of(peer: string, timeoutMs: number): Promise<number> {
    const until = Date.now() + timeoutMs;
    let shared = this.inFlight.get(peer);
    if (shared) shared.until = Math.max(shared.until, until);
    else shared = this.start(peer, until);
    const timedOut = () => new DmsError('timeout', `the ping was aborted due to timeout after ${timeoutMs} ms`);
    try {
      return await settledWithin(shared.result, timeoutMs, () => {
        throw timedOut();
      });
    } catch (e) {
      // The shared ping ends at the last caller's bound, which may be this one's.
      throw Date.now() >= until ? timedOut() : e;
    }
  }

  private start(peer: string, until: number): SharedPing {
    const abort = new AbortController();
    const shared: SharedPing = { result: this.ping(peer, abort.signal), until };
    let timer: NodeJS.Timeout;
    const check = () => {
      const left = shared.until - Date.now();
      if (left > 0) timer = setTimeout(check, left);
      else abort.abort(new DmsError('timeout', 'no caller waits for the ping any more'));
    };
    timer = setTimeout(check, until - Date.now());
    this.inFlight.set(peer, shared);
    // Whoever waits on it hears how it went; a caller that gave up first leaves its failure to nobody.
    shared.result
      .catch(() => undefined)
      .finally(() => {
        clearTimeout(timer);
        this.inFlight.delete(peer);
      });
    return shared;
  }
}
