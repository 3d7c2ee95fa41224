import { rememberNewest } from '../../runtime/bounded-map.js';

/**
 * Round-trip times from this node to its peers (libp2p ping), as a bid for a part that must run
 * `near` another part's node reports them (README "Ensembles"). A requester picks the peer
 * measured, so every bound is this node's: each peer's time is kept a while (a failure too),
 * one measurement per peer at a time, and a bounded number of peers at once.
 */
export interface RoundTripOptions {
  /** How long a measurement (or a failure) is kept. */
  keepMs: number;
  /** Peers measured at once; beyond, the answer is a refusal to measure now. */
  maxInFlight: number;
  /** Peers remembered, oldest forgotten first. */
  maxKept: number;
}

export type RoundTrip = { ms: number } | { error: string };

export class RoundTrips {
  private readonly kept = new Map<string, { at: number; rtt: RoundTrip }>();
  private readonly inFlight = new Map<string, Promise<RoundTrip>>();

  constructor(
    private readonly ping: (peer: string) => Promise<number>,
    private readonly opts: RoundTripOptions = { keepMs: 10_000, maxInFlight: 16, maxKept: 1024 },
  ) {}

  async to(peer: string): Promise<RoundTrip> {
    const kept = this.kept.get(peer);
    if (kept && Date.now() - kept.at < this.opts.keepMs) return kept.rtt;
    const running = this.inFlight.get(peer);
    if (running) return running;
    if (this.inFlight.size >= this.opts.maxInFlight) return { error: `this node is measuring ${this.inFlight.size} round trips already` };
    const measured = this.ping(peer).then(
      (ms): RoundTrip => ({ ms }),
      (e: unknown): RoundTrip => ({ error: e instanceof Error ? e.message : String(e) }),
    );
    this.inFlight.set(peer, measured);
    const rtt = await measured;
    this.inFlight.delete(peer);
    rememberNewest(this.kept, peer, { at: Date.now(), rtt }, this.opts.maxKept);
    return rtt;
  }
}
