/**
 * The members grants this node holds (README "Names between parts"): what each requester said
 * about who hosts its ensembles' parts. Keyed by (requester, ensemble): a requester speaks only
 * for its own ensembles, so a hostile peer sending a grant for another requester's ensemble id
 * fills a slot of its own and changes nothing anyone else relies on. Every count is bounded,
 * since a peer picks how many ensembles it claims.
 */
import { type EnsembleMembers, MAX_GRANT_MS } from '../../behaviors/ensembles/schema.js';
import { DmsError, invalid } from '../../runtime/errors.js';

/** Ensembles one requester may hold grants for here at once. */
export const MAX_GRANTS_PER_REQUESTER = 64;
/** Grants in all: a node hosts parts of far fewer ensembles than this. */
export const MAX_GRANTS = 1024;
/** How far past MAX_GRANT_MS a grant's end may lie: the requester's clock is not ours. Its end is then cut to MAX_GRANT_MS. */
export const GRANT_CLOCK_SKEW_MS = 10_000;

export interface Grant extends EnsembleMembers {
  requester: string;
}

export interface GrantLimits {
  perRequester: number;
  total: number;
}

export type PutResult = { grant: Grant; accepted: boolean };

const key = (requester: string, ensemble: string) => `${requester} ${ensemble}`;

export class GrantRegistry {
  private readonly grants = new Map<string, Grant>();
  private readonly perRequester = new Map<string, number>();
  private readonly listeners = new Set<(grant: Grant | undefined, requester: string, ensemble: string) => void>();

  constructor(
    private readonly limits: GrantLimits = { perRequester: MAX_GRANTS_PER_REQUESTER, total: MAX_GRANTS },
    private readonly now: () => number = Date.now,
  ) {}

  get size(): number {
    return this.grants.size;
  }

  /**
   * Takes `members` as `requester`'s word: a higher version replaces the grant held, the same
   * version renews it (the later end wins), a lower one is ignored (`accepted: false`).
   */
  put(requester: string, members: EnsembleMembers): PutResult {
    const now = this.now();
    if (members.expires_at <= now) throw invalid(`grant for ensemble ${members.ensemble} expired at ${new Date(members.expires_at).toISOString()}, before it arrived`);
    if (members.expires_at > now + MAX_GRANT_MS + GRANT_CLOCK_SKEW_MS) {
      throw invalid(`grant for ensemble ${members.ensemble}: expires_at is more than ${MAX_GRANT_MS} ms ahead (MAX_GRANT_MS); renew it instead`);
    }
    const names = new Set<string>();
    const jobs = new Set<string>();
    for (const p of members.parts) {
      if (names.has(p.part)) throw invalid(`grant for ensemble ${members.ensemble} names part ${p.part} twice`);
      if (jobs.has(p.job_id)) throw invalid(`grant for ensemble ${members.ensemble} gives job ${p.job_id} to two parts`);
      if (new Set(p.ports).size !== p.ports.length) throw invalid(`grant for ensemble ${members.ensemble}: part ${p.part} declares a port twice`);
      names.add(p.part);
      jobs.add(p.job_id);
    }
    const k = key(requester, members.ensemble);
    const held = this.live(k, now);
    if (held && held.version > members.version) return { grant: held, accepted: false };
    if (!held) this.makeRoom(requester, now);
    const expires_at = Math.min(members.expires_at, now + MAX_GRANT_MS);
    const grant: Grant = {
      requester,
      ensemble: members.ensemble,
      version: members.version,
      expires_at: held && held.version === members.version ? Math.max(held.expires_at, expires_at) : expires_at,
      parts: members.parts.map((p) => ({ ...p, ports: [...p.ports] })),
    };
    if (!held) this.perRequester.set(requester, (this.perRequester.get(requester) ?? 0) + 1);
    this.grants.set(k, grant);
    this.changed(grant, requester, members.ensemble);
    return { grant, accepted: true };
  }

  /** Withdraws `requester`'s grant for `ensemble`; false when none was held. */
  revoke(requester: string, ensemble: string): boolean {
    const k = key(requester, ensemble);
    if (!this.grants.has(k)) return false;
    this.remove(k);
    this.changed(undefined, requester, ensemble);
    return true;
  }

  /** The unexpired grant, if any. */
  get(requester: string, ensemble: string): Grant | undefined {
    return this.live(key(requester, ensemble), this.now());
  }

  /** Whether `peer` hosts a part of `requester`'s ensemble, by its unexpired grant: whom the ensemble's tunnels are open to. */
  hostsPart(requester: string, ensemble: string, peer: string): boolean {
    return this.get(requester, ensemble)?.parts.some((p) => p.node === peer) ?? false;
  }

  /** Drops every expired grant (also done lazily on every read). */
  sweep(): void {
    const now = this.now();
    for (const k of [...this.grants.keys()]) this.live(k, now);
  }

  /** Told of every grant that changes or goes (then `undefined`); returns how to stop. */
  onChange(fn: (grant: Grant | undefined, requester: string, ensemble: string) => void): () => void {
    this.listeners.add(fn);
    return () => this.listeners.delete(fn);
  }

  private live(k: string, now: number): Grant | undefined {
    const g = this.grants.get(k);
    if (!g) return undefined;
    if (g.expires_at > now) return g;
    this.remove(k);
    this.changed(undefined, g.requester, g.ensemble);
    return undefined;
  }

  private makeRoom(requester: string, now: number): void {
    if ((this.perRequester.get(requester) ?? 0) >= this.limits.perRequester || this.grants.size >= this.limits.total) {
      // Expired ones first: they hold no room.
      for (const k of [...this.grants.keys()]) this.live(k, now);
    }
    const mine = this.perRequester.get(requester) ?? 0;
    if (mine >= this.limits.perRequester) {
      throw new DmsError('overloaded', `requester ${requester} already holds grants for ${mine} ensembles on this node (at most ${this.limits.perRequester}): revoke one first`);
    }
    if (this.grants.size >= this.limits.total) throw new DmsError('overloaded', `this node already holds ${this.grants.size} ensemble grants (at most ${this.limits.total})`);
  }

  private remove(k: string): void {
    const g = this.grants.get(k);
    if (!g) return;
    this.grants.delete(k);
    const n = (this.perRequester.get(g.requester) ?? 1) - 1;
    if (n <= 0) this.perRequester.delete(g.requester);
    else this.perRequester.set(g.requester, n);
  }

  private changed(grant: Grant | undefined, requester: string, ensemble: string): void {
    for (const fn of this.listeners) fn(grant, requester, ensemble);
  }
}
