import { type Message, TopicValidatorResult } from '@libp2p/gossipsub';
import { createTopicScoreParams, type TopicScoreParams } from '@libp2p/gossipsub/score';
import type { PeerId } from '@libp2p/interface';
import { checkEnvelope } from '../crypto/signing.js';
import { stageEnd, stageStart } from '../stage-timings.js';
import { errorText } from '../errors.js';
import { isExpired } from '../time.js';
import { type Envelope, parseEnvelope } from '../wire/envelope.js';
import { frameText } from './frames.js';
import { RateLimiter } from '../rate-limiter.js';
import type { MessageRates } from './service-streams.js';

/*
 * Valid broadcasts are work: gossipsub checks each one's publisher signature, then the node
 * parses it, checks the envelope's own signature and delivers it. One peer publishing valid
 * broadcasts as fast as it could had a node take 3,696 a second, spending 0.87 of a core (235 µs
 * each). So each is counted twice, five seconds' worth at once: against the peer that relayed it
 * and that peer's host, before gossipsub checks its signature (GOSSIP_RELAY_RATES, ./host.ts), and
 * against its publisher (gossipsub's signed author), before the node parses it
 * (GOSSIP_PUBLISHER_RATE). Past either it is dropped, neither delivered nor relayed.
 */
/** Messages a second one peer, and all the peers on one host, may relay to this node. */
export const GOSSIP_RELAY_RATES: MessageRates = { perPeer: 1_000, perHost: 2_000 };
/** Broadcasts a second of one publisher this node validates, whoever relays them. */
export const GOSSIP_PUBLISHER_RATE = 500;

/**
 * What became of each gossip message that reached this node before gossipsub delivered it:
 * accepted (delivered, and relayed); over_relay_rate (the peer or host relaying it was past
 * GOSSIP_RELAY_RATES: dropped before its signature was checked); over_publisher_rate (its
 * publisher past GOSSIP_PUBLISHER_RATE: dropped before it was parsed); expired (ignored);
 * rejected (invalid: counted against the relaying peer's score). A copy of a message already
 * accepted counts against the relay rates like any message (and as over_relay_rate past them);
 * otherwise gossipsub drops it unjudged, uncounted. Read at `/metrics` as
 * `dms_gossip_messages{outcome}`: a peer flooding the node shows there first.
 */
export type GossipTally = Record<'accepted' | 'over_relay_rate' | 'over_publisher_rate' | 'expired' | 'rejected', number>;
export const gossipTally = (): GossipTally => ({ accepted: 0, over_relay_rate: 0, over_publisher_rate: 0, expired: 0, rejected: 0 });

/**
 * Gossip validation: what a node checks on a broadcast envelope before gossipsub delivers it
 * *or relays it to the mesh*. Without it, every relay forwards whatever it receives and each
 * node's kernel refuses a forgery only after the whole mesh has carried it.
 *
 * Rejected (not delivered, not relayed, and counted against the peer that sent it, see
 * TOPIC_SCORE): larger than the envelope limit, not an envelope, an `opt.topic` other than the
 * topic it came on (the signature covers the topic: replayed onto another it would reach
 * subscribers it was never meant for), a signature that does not verify. Ignored (not
 * delivered, not relayed, no penalty: an honest peer with a slow clock, or a slow path, can
 * send one): an envelope past its `opt.exp`. The kernel still applies every check of its own
 * (replay, capabilities) to what is delivered.
 */
export class GossipValidator {
  // The envelope parsed from each accepted message, for the delivery that follows: gossipsub
  // hands the listener the same message object it validated, so nothing is parsed twice.
  private readonly parsed = new WeakMap<Message, Envelope>();
  private readonly publishers: RateLimiter;

  constructor(
    private readonly maxEnvelopeBytes: number,
    private readonly onReject: (peer: string, topic: string, why: string) => void,
    /** This node's peer id, which its stage timings are published under. */
    private readonly host: string,
    publisherRate = GOSSIP_PUBLISHER_RATE,
    /** Counted into as each message is judged. */
    readonly tally: GossipTally = gossipTally(),
  ) {
    this.publishers = new RateLimiter(publisherRate, publisherRate * 5);
  }

  readonly validate = async (propagationSource: PeerId, msg: Message): Promise<TopicValidatorResult> => {
    const start = stageStart();
    if (start === undefined) return this.check(propagationSource, msg);
    const result = await this.check(propagationSource, msg);
    stageEnd(this.host, 'gossip.validate', start);
    return result;
  };

  private async check(propagationSource: PeerId, msg: Message): Promise<TopicValidatorResult> {
    const reject = (why: string) => {
      this.tally.rejected++;
      this.onReject(propagationSource.toString(), msg.topic, why);
      return TopicValidatorResult.Reject;
    };
    const ignore = (outcome: 'over_publisher_rate' | 'expired') => {
      this.tally[outcome]++;
      return TopicValidatorResult.Ignore;
    };
    // The author whose signature gossipsub checked (this node signs and checks every message).
    if (this.publishers.take(msg.type === 'signed' ? msg.from.toString() : propagationSource.toString()) > 0) return ignore('over_publisher_rate');
    if (msg.data.byteLength > this.maxEnvelopeBytes) return reject(`${msg.data.byteLength} bytes, over the ${this.maxEnvelopeBytes}-byte envelope limit`);
    let env: Envelope;
    try {
      env = parseEnvelope(frameText(msg.data));
    } catch (e) {
      return reject(`undecodable envelope: ${errorText(e)}`);
    }
    if (env.opt.topic !== msg.topic) return reject(`opt.topic ${env.opt.topic ?? '(none)'} is not the topic it came on`);
    if (isExpired(env.opt.exp)) return ignore('expired');
    try {
      const pending = checkEnvelope(env);
      if (pending) await pending;
    } catch (e) {
      return reject(errorText(e));
    }
    this.parsed.set(msg, env);
    this.tally.accepted++;
    return TopicValidatorResult.Accept;
  }

  /** The envelope `validate` accepted this message with, if it did. */
  envelopeOf(msg: Message): Envelope | undefined {
    return this.parsed.get(msg);
  }
}

/**
 * The part of gossipsub's implementation (not of its published interface, at the pinned
 * 17.1.1) that holds per-topic score weights. They can only be given at construction, and a
 * node's topics are known only as it subscribes.
 */
export interface ScoredGossip {
  score?: { params?: { topics?: Record<string, TopicScoreParams> } };
}

/** Scores `topic` with TOPIC_SCORE; false when this gossipsub keeps its weights elsewhere. */
export function scoreTopic(pubsub: object, topic: string): boolean {
  const topics = (pubsub as ScoredGossip).score?.params?.topics;
  if (!topics) return false;
  topics[topic] = TOPIC_SCORE;
  return true;
}

/**
 * Peer-score weights for each topic a node subscribes to. Only invalid messages count (P4,
 * squared): a handful of forgeries takes a peer below gossipsub's gossip threshold (-10), about
 * nine below its graylist (-80), after which its RPCs are ignored; the count decays by 1 % a
 * second. The other topic terms stay off: gossipsub's defaults for them (mesh delivery quotas
 * of 20 messages) would punish the honest but quiet peers of a DMS network.
 */
export const TOPIC_SCORE: TopicScoreParams = createTopicScoreParams({
  topicWeight: 1,
  timeInMeshWeight: 0,
  firstMessageDeliveriesWeight: 0,
  meshMessageDeliveriesWeight: 0,
  meshFailurePenaltyWeight: 0,
  invalidMessageDeliveriesWeight: -1,
  invalidMessageDeliveriesDecay: 0.99,
});
