import { createPeerScoreParams, type PeerScoreParams } from '@libp2p/gossipsub/score';
import { isPrivateIp } from '@libp2p/utils';

/**
 * gossipsub peer scoring for a DMS network (README "Network", "Gossip scoring"). The per-topic
 * weights (invalid messages only) are TOPIC_SCORE in gossip.ts; these are the weights that
 * are not about a topic. gossipsub's thresholds stay at its defaults: below -10 a peer gets no
 * gossip, below -50 nothing is published to it, below -80 (the graylist) its RPCs are ignored.
 */

/**
 * Score of a peer that completed the DMS hello exchange (the discovery actor saw its root
 * answer with its own key). A DMS node is worth more than a libp2p peer that only subscribed:
 * this keeps a greeted peer on a crowded public IP above 0 with up to 7 peers past the
 * colocation threshold there, above the publish threshold with 10 and above the graylist with 11.
 */
export const GREETED_SCORE = 50;
/** Peers on one public IP before each further one costs every peer there (gossipsub's own default). */
export const IP_COLOCATION_THRESHOLD = 10;
/**
 * Per squared peer past the threshold; gossipsub's -5 puts every peer on the IP, greeted or not,
 * past the graylist with 5 extra. Sybils that never greet still cross the gossip threshold
 * (-10) with 4 extra and the graylist with 9.
 */
export const IP_COLOCATION_WEIGHT = -1;
/**
 * How long the score of a departed peer with a score of 0 or less is kept, IP included
 * (gossipsub's default: an hour). A kept record counts towards its IP's colocation as if the peer
 * were still there, so this is how long identities that connect and leave weigh on the genuine
 * peers of their IP. It is also how long a forger's invalid-message penalty survives a reconnect;
 * a new identity is free anyway, so a long memory buys little.
 */
export const RETAIN_SCORE_MS = 10 * 60_000;

/**
 * The IPs gossipsub leaves out of the colocation penalty: loopback, private (RFC 1918, RFC 4193),
 * link-local and the other non-routable ranges. Several DMS nodes on one machine, one LAN or
 * behind one NAT gateway seen from inside are the normal case there, not an attack. gossipsub
 * only asks this set `has(ip)`, so the ranges answer without listing every address.
 */
export class ColocationWhitelist extends Set<string> {
  override has(ip: string): boolean {
    return super.has(ip) || isPrivateIp(ip) === true;
  }
}

/** Peers that completed the hello, for their application score; forgotten when they disconnect. */
export class GreetedPeers {
  private readonly peers = new Set<string>();

  add(peer: string): void {
    this.peers.add(peer);
  }

  delete(peer: string): void {
    this.peers.delete(peer);
  }

  has(peer: string): boolean {
    return this.peers.has(peer);
  }

  readonly score = (peer: string): number => (this.peers.has(peer) ? GREETED_SCORE : 0);
}

/** gossipsub's peer-score parameters for a node; `greeted` gives the application score. */
export function peerScoreParams(greeted: GreetedPeers): PeerScoreParams {
  return createPeerScoreParams({
    appSpecificScore: greeted.score,
    appSpecificWeight: 1,
    IPColocationFactorThreshold: IP_COLOCATION_THRESHOLD,
    IPColocationFactorWeight: IP_COLOCATION_WEIGHT,
    IPColocationFactorWhitelist: new ColocationWhitelist(),
    retainScore: RETAIN_SCORE_MS,
  });
}
