/**
 * gossipsub checks each message's publisher signature before anything of the node sees it, so a
 * peer relaying messages as fast as it could cost the node that check on every one (89 µs here),
 * however the node's own validator then refused them. Now one peer may relay 1,000 messages a
 * second to the node and all the peers on one host 2,000, five seconds' worth at once; past that
 * a message is dropped before gossipsub validates it (patches/@libp2p+gossipsub: `acceptMessage`).
 * Shown here at lower rates, which a flooder sharing this process's event loop goes past.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { KeyPair } from '../../runtime/crypto/keys.js';
import { silentLogger } from '../../runtime/log.js';
import { Libp2pTransport } from '../../runtime/network/libp2p-transport.js';
import { type Gossiper, signedBroadcasts, startGossiper } from '../helpers/gossiper.js';
import { waitFor } from '../helpers/network.js';

const TOPIC = '/dms/hello';
const RATES = { perPeer: 200, perHost: 250 };
let transport: Libp2pTransport;
const peers: Gossiper[] = [];
/** Messages the node read in RPCs, by the peer that relayed them. */
const received = new Map<string, number>();
/** Messages past the relay rate check (handed on to gossipsub's handling), and those gossipsub went on to validate. */
let accepted = 0;
let validated = 0;
/** RPCs whose handling has not finished. */
let handling = 0;

beforeAll(async () => {
  // Rates below what a flooder in this process reaches (the node's own: GOSSIP_RELAY_RATES).
  transport = await Libp2pTransport.create({ keyPair: KeyPair.generate(), listen: ['/ip4/127.0.0.1/tcp/0'], log: silentLogger(), gossipRelayRates: RATES });
  await transport.subscribe(TOPIC);
  const pubsub = transport.node.services.pubsub as unknown as {
    handleReceivedRpc(from: { toString(): string }, rpc: { messages?: unknown[] }): Promise<unknown>;
    handleReceivedMessage(...a: unknown[]): Promise<unknown>;
    validateReceivedMessage(...a: unknown[]): Promise<unknown>;
  };
  const [rpc, handle, validate] = [pubsub.handleReceivedRpc.bind(pubsub), pubsub.handleReceivedMessage.bind(pubsub), pubsub.validateReceivedMessage.bind(pubsub)];
  pubsub.handleReceivedRpc = (from, r) => {
    received.set(from.toString(), (received.get(from.toString()) ?? 0) + (r.messages?.length ?? 0));
    handling++;
    return rpc(from, r).finally(() => handling--);
  };
  pubsub.handleReceivedMessage = (...a) => (accepted++, handle(...a));
  pubsub.validateReceivedMessage = (...a) => (validated++, validate(...a));
}, 60_000);
afterAll(async () => {
  await Promise.all(peers.map((p) => p.stop()));
  await transport?.stop();
});

const gossiper = async (address: string): Promise<Gossiper> => {
  const peer = await startGossiper(transport.node.getMultiaddrs()[0]!.toString(), address, TOPIC);
  peers.push(peer);
  return peer;
};

/** Messages published in one go before the flooder waits for the node to have read them. */
const BATCH = 500;

/**
 * `count` valid envelopes published by `peer`. Valid: the node's validator ignores those past
 * their publisher's rate without counting them against the peer, so nothing but the relay rate
 * stops a flood before gossipsub's check (junk would have the peer graylisted within a few hundred).
 * In batches, each read by the node before the next: the flooder shares this process, and every
 * message must reach the node for its count to say what the node let through.
 */
async function flood(peer: Gossiper, count: number): Promise<void> {
  const from = peer.peerId.toString();
  const base = received.get(from) ?? 0;
  const all = signedBroadcasts(peer, TOPIC, count);
  for (let sent = 0; sent < count; ) {
    for (const d of all.slice(sent, sent + BATCH)) await peer.services.pubsub.publish(TOPIC, d);
    sent = Math.min(count, sent + BATCH);
    await waitFor(`the node to read ${sent} of the ${count} messages ${from.slice(-8)} published`, () => (received.get(from) ?? 0) - base >= sent, { timeoutMs: 20_000, intervalMs: 5 });
  }
}

/**
 * Runs the flood `f`, then waits until every RPC the node read is handled and every message it
 * let past the relay rate has gone to gossipsub's validation: no guess from a count standing
 * still for a second, which a loaded machine's pause ended early (CI rehearsal 60 counted 420
 * of a burst of 1,000). What was let through, and the seconds that took.
 */
async function acceptedDuring(f: () => Promise<void>): Promise<{ count: number; seconds: number }> {
  const [acceptedBefore, validatedBefore] = [accepted, validated];
  const started = Date.now();
  await f();
  await waitFor('every RPC read to be handled, and every message let through validated', () => handling === 0 && validated - validatedBefore === accepted - acceptedBefore, { timeoutMs: 30_000, intervalMs: 20 });
  // Up to the last message handled: the rate's tokens for all that time count.
  return { count: accepted - acceptedBefore, seconds: (Date.now() - started) / 1000 };
}

describe('gossip relayed to the node', () => {
  it('by one peer is validated at its rate: past it a message is dropped before gossipsub checks its signature', { timeout: 60_000 }, async () => {
    const COUNT = 6_000;
    const { perPeer } = RATES;
    const flooder = await gossiper('127.0.0.8');
    const droppedBefore = transport.stats().gossip.over_relay_rate;
    const { count, seconds } = await acceptedDuring(() => flood(flooder, COUNT));
    // Each one dropped is counted (dms_gossip_messages{outcome="over_relay_rate"}).
    expect(transport.stats().gossip.over_relay_rate - droppedBefore).toBe(COUNT - count);
    // Unlimited, all 6,000 were validated (watched failing); five seconds' worth at once, then the rate.
    expect(count).toBeGreaterThanOrEqual(perPeer * 5);
    expect(count).toBeLessThanOrEqual(perPeer * 5 + perPeer * seconds + 1);
    expect(count).toBeLessThan(COUNT);
  });

  it('by the peers of one host is validated at the host’s rate, though each relays within its own', { timeout: 60_000 }, async () => {
    // Each of four peers on one address publishes 1,000, a peer's five seconds' worth: together
    // past the host's 1,250 at once and 250 a second. Counted per peer alone, all 4,000 are
    // validated (watched failing).
    const { perPeer, perHost } = RATES;
    const crowd: Gossiper[] = [];
    for (let i = 0; i < 4; i++) crowd.push(await gossiper('127.0.0.10'));
    const droppedBefore = transport.stats().gossip.over_relay_rate;
    const { count, seconds } = await acceptedDuring(async () => void (await Promise.all(crowd.map((p) => flood(p, perPeer * 5)))));
    expect(transport.stats().gossip.over_relay_rate - droppedBefore).toBe(crowd.length * perPeer * 5 - count);
    expect(count).toBeGreaterThanOrEqual(perHost * 5);
    expect(count).toBeLessThanOrEqual(perHost * 5 + perHost * seconds + 1);
    expect(count).toBeLessThan(crowd.length * perPeer * 5);
  });
});
