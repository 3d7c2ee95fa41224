/**
 * The requester's judgement of bidders, beyond what their bids claim: a bid is a peer's word,
 * and a hostile one says whatever wins (load 0, any labels). A bid is taken only from a node
 *
 *  - not excluded for misbehaving lately (it ignored a cancel, see the remote executor),
 *  - trusted with the job's secrets, when it has any (`placement.trust`, ../orchestrator/trust.ts),
 *  - whose signed profile (/public/describe, answered under its own key and kept by the
 *    discovery actor) shows the labels and location the job asks for.
 *
 * Profiles are asked for only for jobs that ask for labels or a location, and the discovery
 * actor keeps them fresh for `freshMs`: placement of other jobs costs nothing more.
 */
import { PeersDescribeReply, type NodeProfile, DiscoveryBehaviors } from '../../behaviors/discovery.js';
import { labelMismatch, locationMismatch } from '../../behaviors/jobs/fit.js';
import type { Placement } from '../../behaviors/jobs/schema.js';
import type { Actor } from '../../runtime/actor.js';
import { errorText } from '../../runtime/errors.js';
import { rememberNewest } from '../../runtime/bounded-map.js';
import { DISCOVERY_INBOX } from '../discovery.js';
import { type ProviderTrust, untrustedReason } from '../orchestrator/trust.js';

/** How long a node that ignored a cancel is not placed on. */
export const EXCLUDE_MS = 10 * 60_000;
/** Nodes excluded at once at most: the oldest goes first. */
const MAX_EXCLUDED = 4096;
/** The discovery actor waits for stale profiles itself (`profileWaitMs`); this only bounds the hop. */
const PROFILES_TTL_MS = 10_000;

/** Why a bid from `node` is not taken; null to take it. */
export type Vet = (node: string) => string | null;

export class Bidders {
  /** Nodes not placed on until a time (ms since the epoch), and why. */
  private readonly excluded = new Map<string, { until: number; reason: string }>();

  constructor(
    private readonly actor: Actor,
    private readonly trusts: ProviderTrust,
  ) {}

  exclude(node: string, reason: string): void {
    rememberNewest(this.excluded, node, { until: Date.now() + EXCLUDE_MS, reason }, MAX_EXCLUDED);
  }

  /** Why bids from a node cannot be taken for a job with this placement (and secrets or not). */
  async vet(placement: Placement | null, secrets: boolean): Promise<Vet> {
    const now = Date.now();
    for (const [node, e] of this.excluded) if (e.until <= now) this.excluded.delete(node);
    const asks = placement?.labels !== undefined || placement?.location !== undefined;
    const profiles = asks ? await this.profiles() : null;
    const self = this.actor.system.host;
    return (node) => {
      // This node's own bid comes from its own resource manager: nothing to check it against.
      if (node === self) return null;
      const out = this.excluded.get(node);
      if (out && out.until > Date.now()) return `excluded until ${new Date(out.until).toISOString()}: ${out.reason}`;
      if (secrets && !this.trusts(node)) return untrustedReason;
      if (!profiles) return null;
      const profile = profiles.get(node);
      if (!profile) return 'published no profile: a job asking for labels or a location goes only to nodes whose signed profile shows them';
      const mismatch = locationMismatch(placement?.location, profile.location) ?? labelMismatch(placement?.labels, profile.labels);
      return mismatch ? `bid, but its signed profile ${mismatch}` : null;
    };
  }

  /** The profiles the connected peers published, by peer id; none known when discovery does not answer. */
  private async profiles(): Promise<Map<string, NodeProfile>> {
    try {
      const reply = await this.actor.call(this.actor.local(DISCOVERY_INBOX), DiscoveryBehaviors.peersDescribe, {}, PeersDescribeReply, { ttlMs: PROFILES_TTL_MS });
      return new Map(reply.nodes.flatMap((n) => (n.profile ? [[n.id, n.profile] as const] : [])));
    } catch (e) {
      this.actor.system.log.warn({ err: errorText(e) }, 'peer profiles unavailable: bids for jobs asking for labels or a location are not taken');
      return new Map();
    }
  }
}
