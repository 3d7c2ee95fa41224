/**
 * What the gossip validator makes of each message is counted by outcome
 * (`dms_gossip_messages{outcome}` on /metrics): an operator sees a flood, a forger or a peer with
 * a slow clock there, by which of the node's checks stopped it.
 */
import '../../runtime/polyfills.js';
import { generateKeyPair } from '@libp2p/crypto/keys';
import { TopicValidatorResult, type Message } from '@libp2p/gossipsub';
import { peerIdFromPrivateKey } from '@libp2p/peer-id';
import { describe, expect, it } from 'vitest';
import { KeyPair } from '../../runtime/crypto/keys.js';
import { GossipValidator } from '../../runtime/network/gossip.js';
import { msToNs, nextNonce, nowNs } from '../../runtime/time.js';
import { emptyHandle, encodeEnvelope, encodePayload } from '../../runtime/wire/envelope.js';
import { signEnvelopeSync } from '../helpers/envelopes.js';

const TOPIC = '/dms/hello';
const key = KeyPair.generate();
const publisher = peerIdFromPrivateKey(await generateKeyPair('Ed25519'));

/** A broadcast envelope on `topic`, signed by `key` unless `forged`, expiring `expMs` from now. */
function broadcast(opts: { topic?: string; expMs?: number; forged?: boolean } = {}): Uint8Array {
  const env = signEnvelopeSync(
    { to: emptyHandle(), be: '/broadcast/hello', from: { id: key.id, did: key.did, addr: { host: publisher.toString(), inbox: 'g' } }, nonce: nextNonce(), opt: { exp: nowNs() + msToNs(opts.expMs ?? 60_000), topic: opts.topic ?? TOPIC }, msg: encodePayload({}) },
    key,
  );
  if (opts.forged) env.msg = encodePayload({ changed: true });
  return Buffer.from(encodeEnvelope(env));
}
const message = (data: Uint8Array): Message => ({ type: 'signed', from: publisher, topic: TOPIC, data, sequenceNumber: nextNonce(), signature: new Uint8Array(64), key: publisher.publicKey! }) as Message;

describe('the gossip validator', () => {
  it('counts each message it judges by outcome', async () => {
    const rejections: string[] = [];
    // A publisher may have two a second, ten at once.
    const validator = new GossipValidator(64 * 1024, (_peer, _topic, why) => rejections.push(why), 'node', 2);
    const judge = (data: Uint8Array) => validator.validate(publisher, message(data));
    expect(await judge(broadcast())).toBe(TopicValidatorResult.Accept);
    expect(await judge(broadcast({ expMs: -1_000 }))).toBe(TopicValidatorResult.Ignore);
    expect(await judge(broadcast({ forged: true }))).toBe(TopicValidatorResult.Reject);
    expect(await judge(broadcast({ topic: '/dms/other' }))).toBe(TopicValidatorResult.Reject);
    expect(await judge(Buffer.from('not an envelope'))).toBe(TopicValidatorResult.Reject);
    expect(rejections).toHaveLength(3);
    // Five judged so far: five more within the burst, then past the publisher's rate.
    for (let i = 0; i < 5; i++) expect(await judge(broadcast())).toBe(TopicValidatorResult.Accept);
    expect(await judge(broadcast())).toBe(TopicValidatorResult.Ignore);
    expect(validator.tally).toEqual({ accepted: 6, over_relay_rate: 0, over_publisher_rate: 1, expired: 1, rejected: 3 });
  });
});
