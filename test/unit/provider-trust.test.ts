import { describe, expect, it } from 'vitest';
import { providerTrust } from '../../actors/orchestrator/trust.js';
import { didOfPeer, KeyPair, peerIdFromPublicKey } from '../../runtime/crypto/keys.js';

/* Who gets a job's secrets (config placement.trust): the real path is test/security/hostile-bidder.test.ts. */

const node = () => {
  const key = KeyPair.generate();
  return { did: key.did, peer: peerIdFromPublicKey(key.publicKey) };
};

describe('provider trust', () => {
  it("a peer id's DID is the did:key of the key it inlines; anything else has none", () => {
    const n = node();
    expect(didOfPeer(n.peer)).toBe(n.did);
    expect(didOfPeer('not-a-peer-id')).toBeNull();
    expect(didOfPeer('QmYyQSo1c1Ym7orWxLYvCrM2EmxFTANf8wXmmE7DWjhx5N')).toBeNull();
  });

  it('anchored: this node and root anchors only; any: everyone', () => {
    const [self, anchored, stranger] = [node(), node(), node()];
    const roots = new Set([anchored.did]);
    const trusts = providerTrust('anchored', self.peer, { isRoot: (did) => roots.has(did) });
    expect([self, anchored, stranger].map((n) => trusts(n.peer))).toEqual([true, true, false]);
    roots.add(stranger.did);
    // The anchors are read at each decision: an operator's change counts at once.
    expect(trusts(stranger.peer)).toBe(true);
    expect(providerTrust('any', self.peer)(node().peer)).toBe(true);
    expect(providerTrust('anchored', self.peer)(anchored.peer)).toBe(false);
  });
});
