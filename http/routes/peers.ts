/**
 * /api/v1/peers: the peers connected now with the profiles they signed, for clients that speak
 * only REST (`dms run` names the node its job went to from it).
 *
 * A job pinned to a peer that offers nothing would wait for a share its operator never gave,
 * and its submitter would watch it hang. The requester holds every connected peer's signed
 * profile (/public/describe, answered under the peer's own key): when that profile says the
 * peer onboarded no share, the submission is refused at once, naming why.
 */
import * as z from 'zod';
import { DiscoveryBehaviors, PeersDescribeReply } from '../../behaviors/discovery.js';
import type { JobSpec } from '../../behaviors/jobs/schema.js';
import { DmsError, errorText } from '../../runtime/errors.js';
import type { ActorSystem } from '../../runtime/system.js';
import type { HttpApi } from '../actor.js';
import type { RouteModule } from './types.js';

// The discovery actor lives in the root actor's inbox (actors/root.ts).
const ROOT_INBOX = 'root';
// It bounds its own wait for stale profiles (3 s); this bounds the local hop.
const DESCRIBE_TTL_MS = 10_000;

/** The describe reply, with this node's own peer id beside its peers'. */
const PeersReply = PeersDescribeReply.extend({ self: z.string() });

export const peerRoutes: RouteModule = ({ table, system, http }) => {
  table.add({
    method: 'GET',
    path: '/api/v1/peers',
    operationId: 'listPeers',
    summary: 'The peers connected now, each with the profile it published (name, offered share, labels, location, executors)',
    tags: ['peers'],
    responses: { 200: { description: 'as the /dms/node/peers/describe behavior answers, and `self`: this node\'s peer id', schema: PeersReply } },
    handler: async () => ({ self: system.host, ...(await describePeers(http)) }),
  });
};

async function describePeers(http: HttpApi, fresh?: string[]): Promise<PeersDescribeReply> {
  return PeersDescribeReply.parse(await http.call(ROOT_INBOX, DiscoveryBehaviors.peersDescribe, fresh ? { fresh } : {}, DESCRIBE_TTL_MS));
}

export async function refuseNodeOfferingNothing(spec: JobSpec, { system, http }: { system: ActorSystem; http: HttpApi }): Promise<void> {
  const node = spec.placement?.node;
  if (node === undefined || system.isHere(node)) return;
  let reply: PeersDescribeReply;
  const asked = Date.now();
  try {
    // Asked again now: a share onboarded a moment ago must not be refused from an older copy.
    reply = await describePeers(http, [node]);
  } catch (e) {
    // Without profiles the job is placed as before: pending with the provider's own reason.
    system.log.debug({ err: errorText(e) }, 'pinned job: peer profiles unavailable, not checked at submission');
    return;
  }
  const peer = reply.nodes.find((n) => n.id === node);
  // Only an answer to this question refuses: a peer slow to answer shows its older profile,
  // which may predate its share, and the job then waits with the provider's own reason.
  const answeredNow = peer?.last_seen != null && Date.parse(peer.last_seen) >= asked;
  const profile = peer?.profile;
  if (profile && answeredNow && profile.onboarded === null) {
    const name = profile.name ? ` (${profile.name.slice(0, 64)})` : '';
    throw new DmsError('conflict', `placement.node: ${node}${name} offers nothing to the network (no onboarded share; its operator offers one with \`dms onboard\`)`);
  }
}
