import { publicKeyFromRaw } from '@libp2p/crypto/keys';
import { TopicValidatorResult } from '@libp2p/gossipsub';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { KeyPair } from '../../runtime/crypto/keys.js';
import { createHost, type DmsLibp2p, gossipFastId } from '../../runtime/network/host.js';
import { waitFor } from '../helpers/network.js';

/*
 * In a mesh every peer relays a message to every other, so each node hears it from several
 * peers. gossipsub checks a copy's StrictSign signature before it looks the message up as seen,
 * unless a fast id recognises the copy first (host.ts, gossipFastId): then a node pays one
 * Ed25519 check per message, not one per copy.
 */

const TOPIC = '/dms-test/copies';
// Where gossipsub checks a StrictSign signature: the verify of @libp2p/crypto's Ed25519 public key.
const ed25519PublicKey = Object.getPrototypeOf(publicKeyFromRaw(KeyPair.generate().publicKey)) as { verify(...args: unknown[]): unknown };
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
// gossipsub's own method, outside the PubSub interface its service is typed by.
const meshOf = (h: DmsLibp2p): string[] => (h.services.pubsub as unknown as { getMeshPeers(topic: string): string[] }).getMeshPeers(TOPIC);

describe('gossip copies', () => {
  let hosts: DmsLibp2p[] = [];
  const received = new Map<string, number>();

  beforeAll(async () => {
    hosts = await Promise.all(Array.from({ length: 4 }, () => createHost({ keyPair: KeyPair.generate() })));
    for (const h of hosts) {
      h.services.pubsub.topicValidators.set(TOPIC, () => TopicValidatorResult.Accept);
      h.services.pubsub.addEventListener('gossipsub:message', () => {
        const id = h.peerId.toString();
        received.set(id, (received.get(id) ?? 0) + 1);
      });
    }
    await Promise.all(hosts.map((h) => h.start()));
    for (const [i, a] of hosts.entries()) for (const b of hosts.slice(i + 1)) await a.dial(b.getMultiaddrs());
    for (const h of hosts) h.services.pubsub.subscribe(TOPIC);
    // Until every node has every other in its mesh for the topic (heartbeats graft them).
    await waitFor('every mesh to hold the other three', () => hosts.every((h) => meshOf(h).length === hosts.length - 1), { timeoutMs: 10_000, intervalMs: 100 });
  }, 20_000);

  afterAll(async () => {
    await Promise.all(hosts.map((h) => h.stop()));
  });

  it('identifies a message by its publisher and sequence number', () => {
    const from = Uint8Array.from([1, 2, 3]);
    const id = gossipFastId({ from, seqno: Uint8Array.from([0, 9]) });
    expect(gossipFastId({ from: Uint8Array.from([1, 2, 3]), seqno: Uint8Array.from([0, 9]) })).toBe(id);
    expect(gossipFastId({ from, seqno: Uint8Array.from([0, 10]) })).not.toBe(id);
    expect(gossipFastId({ from: Uint8Array.from([1, 2, 4]), seqno: Uint8Array.from([0, 9]) })).not.toBe(id);
  });

  it("checks each message's signature once per node, however many peers relay it", async () => {
    const verify = vi.spyOn(ed25519PublicKey, 'verify');
    const messages = 20;
    let checks: number;
    try {
      const [publisher] = hosts;
      for (let i = 0; i < messages; i++) await publisher.services.pubsub.publish(TOPIC, new TextEncoder().encode(`message ${i} `.padEnd(1500, '.')));
      const receivers = hosts.slice(1).map((h) => h.peerId.toString());
      await waitFor('every node to get every message', () => receivers.every((id) => (received.get(id) ?? 0) >= messages), { timeoutMs: 10_000, intervalMs: 50 });
      // Copies still in flight when the last one was delivered are checked (or not) now.
      await sleep(500);
      checks = verify.mock.calls.length;
    } finally {
      verify.mockRestore();
    }
    // Each receiver checks each message once; without the fast id it checks each copy: three
    // per message here (checked: 180 for 60). A copy that lands while the first is between its
    // check and its entry in the seen cache is checked too, hence the margin.
    const once = messages * (hosts.length - 1);
    expect(checks).toBeGreaterThanOrEqual(once);
    expect(checks).toBeLessThan(once * 1.5);
  });

  it("a forged copy sent ahead of a message (its publisher and sequence number, a bad signature) does not shadow it", async () => {
    const [publisher, receiver, attacker] = hosts;
    const seen: { seqno: bigint; data: string }[] = [];
    const listener = (evt: CustomEvent<{ msg: { type: string; from?: { toString(): string }; sequenceNumber?: bigint; data: Uint8Array } }>) => {
      const { msg } = evt.detail;
      if (msg.type === 'signed' && msg.from?.toString() === publisher.peerId.toString()) seen.push({ seqno: msg.sequenceNumber!, data: new TextDecoder().decode(msg.data) });
    };
    receiver.services.pubsub.addEventListener('gossipsub:message', listener as unknown as EventListener);
    try {
      // The sequence number is a counter (one per process here): the next message takes the next one.
      await publisher.services.pubsub.publish(TOPIC, new TextEncoder().encode('first'));
      await waitFor('the first message', () => seen.some((m) => m.data === 'first'));
      const next = seen.find((m) => m.data === 'first')!.seqno + 1n;
      const seqno = new Uint8Array(8);
      new DataView(seqno.buffer).setBigUint64(0, next);
      // As a peer would send it: the publisher's id and the coming sequence number, other data, a signature that is not one.
      const gossip = receiver.services.pubsub as unknown as { handleReceivedRpc(from: unknown, rpc: unknown): Promise<void> };
      await gossip.handleReceivedRpc(attacker.peerId, {
        subscriptions: [],
        messages: [{ from: publisher.peerId.toMultihash().bytes, seqno, data: new TextEncoder().encode('forged'), topic: TOPIC, signature: new Uint8Array(64) }],
      });
      await publisher.services.pubsub.publish(TOPIC, new TextEncoder().encode('real'));
      await waitFor('the real message', () => seen.some((m) => m.data === 'real'), { timeoutMs: 10_000 });
      expect(seen.find((m) => m.data === 'real')!.seqno).toBe(next);
      expect(seen.map((m) => m.data)).not.toContain('forged');
    } finally {
      receiver.services.pubsub.removeEventListener('gossipsub:message', listener as unknown as EventListener);
    }
  });
});
