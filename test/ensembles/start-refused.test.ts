/**
 * All or nothing at the start of an ensemble: a provider that reserves one part and then refuses
 * to start it makes the requester let go of every other part it had placed in that round (the
 * part running on the requester itself is stopped and given a new job), so no part runs alone
 * while the ensemble waits for a node for the refused one. The requester is a node in process;
 * the provider a libp2p peer that bids, grants a lease, takes the members grant and refuses
 * every start.
 */
import { afterAll, beforeAll, expect, it } from 'vitest';
import { DEPLOYMENT_TOPIC } from '../../behaviors/jobs/deployment.js';
import type { Envelope } from '../../runtime/wire/envelope.js';
import { type LocalNode, startLocalNode } from '../helpers/local-node.js';
import { waitFor } from '../helpers/network.js';
import { ForeignPeer, refuseEveryStart } from '../helpers/peer.js';
import { rest } from '../helpers/rest.js';

type Part = { part: string; job_id: string; node: string | null; status: string };
type Ensemble = { id: string; status: string; reason: string | null; parts: Part[] };

let requester: LocalNode;
let provider: ForeignPeer;
/** Each deployment request the provider received. */
const received: Envelope[] = [];

beforeAll(async () => {
  requester = await startLocalNode();
  expect((await rest(requester, 'PUT', '/api/v1/device/config', { onboarded: { cpu: 1, memory: '1GiB' } })).status).toBe(200);
  provider = await ForeignPeer.connectedTo(requester);
  provider.transport.subscribe(DEPLOYMENT_TOPIC);
  await waitFor('the provider in the deployment mesh', () => provider.transport.topicPeers(DEPLOYMENT_TOPIC).length > 0, { timeoutMs: 15_000, intervalMs: 50 });
  // The members grant it is sent before the start: taken as given.
  refuseEveryStart(provider, (env) => received.push(env), (_env, body) => ({ ensemble: body.ensemble, version: body.version, expires_at: body.expires_at, parts: body.parts }));
}, 60_000);
afterAll(async () => {
  await provider?.stop();
  await requester?.stop();
});

const ensemble = async (id: string) => (await rest(requester, 'GET', `/api/v1/ensembles/${id}`)).json as Ensemble;
const partOf = (e: Ensemble, name: string) => e.parts.find((p) => p.part === name)!;
const nullPart = (extra: Record<string, unknown>) => ({ image: 'none', executor: 'null', resources: { cpu: 0.25, memory: '16MiB' }, ...extra });

it('a start refused for one part stops the part placed with it, which waits to be placed again with it', { timeout: 30_000 }, async () => {
  const made = await rest(requester, 'POST', '/api/v1/ensembles', {
    name: 'refused-start',
    parts: {
      here: nullPart({ kind: 'service', environment: { DMS_NULL_DURATION_MS: '60000' }, placement: { node: requester.peerId } }),
      // More than the requester's share: only the provider bids for it.
      there: nullPart({ resources: { cpu: 2, memory: '16MiB' } }),
    },
  });
  expect(made.status, JSON.stringify(made.json)).toBe(201);
  const id = (made.json as Ensemble).id;
  const first = partOf(made.json as Ensemble, 'here').job_id;
  // The waits together stay under the test's 30 s.
  await waitFor('a start request for part there', () => received.some((e) => e.be === '/dms/deployment/start'), { timeoutMs: 10_000, intervalMs: 20 });
  const stopped = await waitFor('the first job of part here stopped', async () => {
    const job = (await rest(requester, 'GET', `/api/v1/jobs/${first}`)).json as { status: string; error: string | null };
    return job.status === 'failed' ? job : undefined;
  }, { timeoutMs: 8_000 });
  expect(stopped.error).toMatch(new RegExp(`^cancelled: its ensemble is placed again: part there did not start on node ${provider.host}: .*cannot start it after all`));
  const again = await waitFor('part here given a new job', async () => {
    const now = await ensemble(id);
    return partOf(now, 'here').job_id && partOf(now, 'here').job_id !== first ? now : undefined;
  }, { timeoutMs: 5_000 });
  expect(again.status).toBe('pending');
  // The refused part's job now excludes the provider, the one node that could hold it: no round
  // places the ensemble now, and none starts `here` alone meanwhile.
  const waiting = await waitFor('the ensemble waiting for a node for part there', async () => {
    const now = await ensemble(id);
    return now.reason?.startsWith('waiting for nodes:') ? now : undefined;
  }, { timeoutMs: 5_000 });
  expect(partOf(waiting, 'here').status).toBe('pending');
  const usage = (await rest(requester, 'GET', '/api/v1/resources/usage')).json as { allocated: { cpu: { cores: number } } };
  expect(usage.allocated.cpu.cores).toBe(0);
  expect((await rest(requester, 'DELETE', `/api/v1/ensembles/${id}`)).json).toMatchObject({ status: 'failed', reason: 'cancelled' });
});
