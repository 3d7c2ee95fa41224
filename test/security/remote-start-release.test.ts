/**
 * A provider that refuses to start what it reserved: the requester (a node in process) lets
 * the reservation go at once with `/dms/deployment/release`, rather than leaving the
 * provider's share held until the lease runs out. The provider here is a libp2p peer that
 * bids, grants a minute's lease and refuses every start, noting when each request came.
 */
import { afterAll, beforeAll, expect, it } from 'vitest';
import { DEPLOYMENT_TOPIC } from '../../behaviors/jobs/deployment.js';
import { decodePayload, type Envelope } from '../../runtime/wire/envelope.js';
import { type LocalNode, startLocalNode } from '../helpers/local-node.js';
import { waitFor } from '../helpers/network.js';
import { ForeignPeer, refuseEveryStart } from '../helpers/peer.js';
import { rest } from '../helpers/rest.js';

let requester: LocalNode;
let provider: ForeignPeer;
/** Each deployment request the provider received, with when (performance.now()). */
const received: { env: Envelope; at: number }[] = [];

beforeAll(async () => {
  requester = await startLocalNode();
  provider = await ForeignPeer.connectedTo(requester);
  provider.transport.subscribe(DEPLOYMENT_TOPIC);
  await waitFor('the provider in the deployment mesh', () => provider.transport.topicPeers(DEPLOYMENT_TOPIC).length > 0, { timeoutMs: 15_000, intervalMs: 50 });
  refuseEveryStart(provider, (env) => received.push({ env, at: performance.now() }));
}, 60_000);
afterAll(async () => {
  await provider?.stop();
  await requester?.stop();
});

const about = (be: string, jobId: string) =>
  received.filter((r) => r.env.be === be && JSON.stringify(decodePayload(r.env.msg)).includes(jobId));

it('releases the reservation as soon as the provider refuses its start, not when the lease runs out', { timeout: 30_000 }, async () => {
  const { status, json: job } = await rest(requester, 'POST', '/api/v1/jobs', {
    name: 'refused', image: 'none', executor: 'null', resources: { cpu: 0.5, memory: '64MiB' }, placement: { node: provider.host },
  });
  expect(status, JSON.stringify(job)).toBe(201);
  const [start] = await waitFor('a start request for the job', () => (about('/dms/deployment/start', job.id).length ? about('/dms/deployment/start', job.id) : undefined), { timeoutMs: 15_000, intervalMs: 20 });
  const [release] = await waitFor('the release of its reservation', () => (about('/dms/deployment/release', job.id).length ? about('/dms/deployment/release', job.id) : undefined), { timeoutMs: 10_000, intervalMs: 20 });
  expect(decodePayload(release.env.msg)).toEqual({ job_id: job.id });
  // The lease granted was a minute: the release came with the refusal, in its own time.
  expect(release.at - start.at).toBeLessThan(3_000);
  await rest(requester, 'DELETE', `/api/v1/jobs/${job.id}`);
});
