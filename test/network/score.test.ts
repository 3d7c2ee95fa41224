/**
 * The node's gossip score parameters (runtime/network/score.ts), in process: what 16 sybils on
 * one IP do to a genuine peer there, on a public IP (where the colocation penalty applies) and
 * on loopback and private ones (where it does not); and the hello hook that scores a peer up.
 */
import type { ComponentLogger } from '@libp2p/interface';
import { createPeerScoreParams, PeerScore } from '@libp2p/gossipsub/score';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { KeyPair } from '../../runtime/crypto/keys.js';
import { silentLogger } from '../../runtime/log.js';
import { Libp2pTransport } from '../../runtime/network/libp2p-transport.js';
import { GREETED_SCORE, GreetedPeers, peerScoreParams } from '../../runtime/network/score.js';
import { waitFor } from '../helpers/network.js';

const GRAYLIST = -80;
const PUBLISH = -50;
const SYBILS = 16;
const quiet = Object.assign(() => undefined, { error: () => undefined, trace: () => undefined, newScope: () => quiet, enabled: false });
const logger = { forComponent: () => quiet } as unknown as ComponentLogger;

/** The scores a node gives a genuine peer and one sybil after `SYBILS` sybils were seen on `ip` (and left). */
function afterSybils(params: ReturnType<typeof peerScoreParams>, ip: string, greeted?: GreetedPeers): { genuine: number; sybil: number } {
  const score = new PeerScore(params, null, logger, { scoreCacheValidityMs: 0 });
  score.addPeer('genuine');
  score.addIP('genuine', ip);
  greeted?.add('genuine');
  for (let i = 0; i < SYBILS; i++) {
    score.addPeer(`sybil-${i}`);
    score.addIP(`sybil-${i}`, ip);
    // Gone, but kept: its score is not above 0.
    score.removePeer(`sybil-${i}`);
  }
  return { genuine: score.score('genuine'), sybil: score.score('sybil-0') };
}

describe('gossip score parameters against 16 sybils on one IP', () => {
  it("gossipsub's defaults graylist the genuine peer on loopback as on a public IP", () => {
    for (const ip of ['127.0.0.1', '203.0.114.7']) expect(afterSybils(createPeerScoreParams({}), ip).genuine).toBeLessThan(GRAYLIST);
  });

  it('loopback, private and link-local IPs carry no colocation penalty', () => {
    for (const ip of ['127.0.0.1', '10.1.2.3', '192.168.1.20', '172.20.0.5', '169.254.3.4', '::1', 'fd00::5', 'fe80::1']) {
      expect(afterSybils(peerScoreParams(new GreetedPeers()), ip), ip).toEqual({ genuine: 0, sybil: 0 });
    }
  });

  it('on a public IP a greeted peer stays above 0 while the sybils fall below the gossip threshold', () => {
    const greeted = new GreetedPeers();
    const { genuine, sybil } = afterSybils(peerScoreParams(greeted), '203.0.114.7', greeted);
    expect(genuine).toBeGreaterThan(0);
    expect(sybil).toBeLessThan(-10);
    // Not greeted, the genuine peer is as badly off as a sybil, but still above the publish threshold.
    const ungreeted = afterSybils(peerScoreParams(new GreetedPeers()), '203.0.114.7');
    expect(ungreeted.genuine).toBe(sybil);
    expect(ungreeted.genuine).toBeGreaterThan(PUBLISH);
  });

  it('keeps a departed peer for 10 minutes, not an hour', () => {
    expect(peerScoreParams(new GreetedPeers()).retainScore).toBe(10 * 60_000);
  });
});

describe('markGreeted, on two transports', () => {
  let a: Libp2pTransport;
  let b: Libp2pTransport;
  const scoreOf = (t: Libp2pTransport, peer: string): number => (t.node.services.pubsub as unknown as { getScore(p: string): number }).getScore(peer);

  beforeAll(async () => {
    const start = () => Libp2pTransport.create({ keyPair: KeyPair.generate(), listen: ['/ip4/127.0.0.1/tcp/0'], log: silentLogger() });
    [a, b] = await Promise.all([start(), start()]);
    a.subscribe('/dms/hello');
    b.subscribe('/dms/hello');
    await a.connect(b.addrs()[0]);
    await waitFor('b to see a on gossipsub', () => b.topicPeers('/dms/hello').includes(a.host), { timeoutMs: 10_000, intervalMs: 50 });
  });
  afterAll(() => Promise.all([a?.stop(), b?.stop()]));

  it('scores a greeted peer up while it stays connected, and ignores a peer that is not connected', async () => {
    expect(scoreOf(b, a.host)).toBe(0);
    b.markGreeted(a.host);
    await waitFor('b to score a up', () => scoreOf(b, a.host) === GREETED_SCORE, { timeoutMs: 5_000, intervalMs: 50 });
    const stranger = KeyPair.generate().peerId;
    b.markGreeted(stranger);
    expect(scoreOf(b, stranger)).toBe(0);
  });
});
