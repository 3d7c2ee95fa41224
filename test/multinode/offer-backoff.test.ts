import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DEPLOYMENT_TOPIC } from '../../behaviors/jobs/deployment.js';
import { signEnvelopeSync } from '../helpers/envelopes.js';
import { nextNonce } from '../../runtime/time.js';
import { decodePayload, encodePayload, type Envelope } from '../../runtime/wire/envelope.js';
import { waitFor } from '../helpers/network.js';
import { type NodeProcess, removeHome, startNode } from '../helpers/node.js';
import { ForeignPeer } from '../helpers/peer.js';

/**
 * README "Which node": a job nobody can hold is offered again, at first after 1 s and then less
 * often, at most 8 s apart. Read off the times its bid requests reach a peer that declines each
 * at once (so every offer's window closes as soon as it is sent). About 25 s.
 */

let node: NodeProcess;
let peer: ForeignPeer;
const offers = new Map<string, number[]>();

beforeAll(async () => {
  node = await startNode({});
  peer = await ForeignPeer.connectedTo(node);
  peer.transport.subscribe(DEPLOYMENT_TOPIC);
  peer.transport.onEnvelope((env: Envelope) => {
    if (env.be !== '/dms/deployment/bid' || !env.opt.cont) return;
    const jobs = (decodePayload(env.msg) as { jobs: { job_id: string }[] }).jobs;
    for (const j of jobs) offers.set(j.job_id, [...(offers.get(j.job_id) ?? []), Date.now()]);
    const reply = {
      to: env.from,
      be: env.opt.cont,
      from: { id: peer.key.id, did: peer.key.did, addr: { host: peer.host, inbox: 'deployment' } },
      nonce: nextNonce(),
      opt: { exp: env.opt.exp },
      msg: encodePayload({ node: peer.host, answers: jobs.map((j) => ({ job_id: j.job_id, declined: 'not here' })) }),
    };
    void peer.send(signEnvelopeSync(reply, peer.key));
  });
  // Subscriptions are exchanged when the gossip stream opens: until then the first offer would miss the peer.
  await waitFor('the node and the peer to see each other on the topic', () => peer.transport.topicPeers(DEPLOYMENT_TOPIC).includes(node.peerId), { timeoutMs: 15_000, intervalMs: 50 });
  await new Promise((r) => setTimeout(r, 500));
}, 60_000);
afterAll(async () => {
  await peer?.stop();
  await node?.stop();
  if (node) removeHome(node.home);
});

describe('the offer back-off', () => {
  it('offers a job nobody can hold again after about 1 s, then 2, 4 and 8 s, and never more than 8 s apart', { timeout: 45_000 }, async () => {
    const res = await fetch(`${node.url}/api/v1/jobs`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ name: 'nowhere', image: 'none', executor: 'null', placement: { labels: { zone: 'nowhere' } } }),
    });
    expect(res.status).toBe(201);
    const { id } = (await res.json()) as { id: string };
    try {
      // Offer n + 1 comes at most 8 s (+ the 1-s retry tick + slack) after offer n.
      await waitFor('6 offers of the job', () => (offers.get(id)?.length ?? 0) >= 6, { timeoutMs: 36_000, intervalMs: 50 }).catch(() => undefined);
      const times = offers.get(id) ?? [];
      const gaps = times.slice(1).map((t, i) => (t - times[i]) / 1000);
      const seen = `gaps between offers: ${gaps.map((g) => g.toFixed(2)).join(', ')} s`;
      expect(times.length, seen).toBeGreaterThanOrEqual(6);
      // The back-off doubles from 1 s (checked on a 1-s tick), so each gap is its step to about 1 s more.
      const steps = [1, 2, 4, 8, 8];
      gaps.slice(0, 5).forEach((g, i) => {
        expect(g, seen).toBeGreaterThanOrEqual(steps[i] - 0.1);
        expect(g, seen).toBeLessThan(steps[i] + 1.9);
      });
    } finally {
      await fetch(`${node.url}/api/v1/jobs/${id}`, { method: 'DELETE' });
    }
  });
});
