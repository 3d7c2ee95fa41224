/**
 * The round trips of a placement (issue 25's placement leads): a requester with few peers asks
 * each for bids directly rather than through the topic's gossip, and a job placed on its own
 * starts with its reserve (ReserveRequest.start), one round trip to the provider instead of
 * two. Two nodes in this process on real libp2p (node b offers on the topic only,
 * `deployment.direct_bid_peers: 0`), and a peer that answers as a release before this one did
 * (its reserve takes no `start`), against which the requester falls back to two steps.
 */
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { providerMachine } from '../../actors/deployment/provider-machine.js';
import { DEPLOYMENT_TOPIC } from '../../behaviors/jobs/deployment.js';
import { decodePayload, type Envelope } from '../../runtime/wire/envelope.js';
import { type LocalNode, startLocalNode } from '../helpers/local-node.js';
import { startCluster, stopCluster, waitFor } from '../helpers/network.js';
import { answerAsProvider, ForeignPeer } from '../helpers/peer.js';

let a: LocalNode;
let b: LocalNode;

const put = (node: LocalNode, path: string, body: unknown) =>
  fetch(`${node.url}${path}`, { method: 'PUT', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
const post = async (node: LocalNode, body: unknown) => {
  const r = await fetch(`${node.url}/api/v1/jobs`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
  const json = await r.json();
  expect(r.status, JSON.stringify(json)).toBe(201);
  return json as { id: string };
};
type JobView = { status: string; node: string | null; error: string | null; attempts: { node: string; outcome: string | null; reason: string | null }[] };
const job = async (node: LocalNode, id: string) => (await (await fetch(`${node.url}/api/v1/jobs/${id}`)).json()) as JobView;
const ended = (node: LocalNode, id: string) =>
  waitFor(`job ${id} to end on ${node.peerId.slice(-6)}`, async () => {
    const j = await job(node, id);
    return j.status === 'completed' || j.status === 'failed' ? j : undefined;
  }, { timeoutMs: 20_000 });
/** dms_envelopes_total of one behavior and outcome on `node`'s /metrics (0 when never counted). */
const envelopes = async (node: LocalNode, behavior: string, outcome = 'ok') => {
  const text = await (await fetch(`${node.url}/metrics`)).text();
  const line = text.split('\n').find((l) => l.startsWith(`dms_envelopes_total{behavior="${behavior}",outcome="${outcome}"}`));
  return line ? Number(line.split(' ').at(-1)) : 0;
};
const heldCores = async (node: LocalNode) =>
  ((await (await fetch(`${node.url}/api/v1/resources/usage`)).json()) as { allocated: { cpu: { cores: number } } }).allocated.cpu.cores;

beforeAll(async () => {
  // Node a lets its users name a registry on this machine; node b, as by default, does not:
  // a job naming one is leased on b (the bid does not look at images) and refused at its start.
  [a, b] = await startCluster(2, {
    start: startLocalNode,
    node: (i) => ({ config: i === 0 ? { jobs: { allowed_registries: ['localhost:5000'] } } : { deployment: { direct_bid_peers: 0 } } }),
  });
  expect((await put(b, '/api/v1/device/config', { onboarded: { cpu: 1, memory: '1GiB' } })).status).toBe(200);
}, 120_000);
afterAll(() => stopCluster([a, b]));

describe('a job placed on another node', { timeout: 40_000 }, () => {
  it('starts with its reserve: the provider is never sent a start of its own', async () => {
    const reservesBefore = await envelopes(b, '/dms/deployment/reserve');
    const { id } = await post(a, { name: 'one-trip', image: 'none', executor: 'null', resources: { cpu: 0.1, memory: '16MiB' }, placement: { node: b.peerId } });
    const done = await ended(a, id);
    expect(done).toMatchObject({ status: 'completed', node: b.peerId });
    expect(await envelopes(b, '/dms/deployment/reserve')).toBe(reservesBefore + 1);
    expect(await envelopes(b, '/dms/deployment/start')).toBe(0);
    // The provider ran it for a: its own record names the requester.
    expect(((await (await fetch(`${b.url}/api/v1/jobs/${id}`)).json()) as { requester: string }).requester).toBe(a.peerId);
  });

  it('offers a job asking more than its whole share at once, without asking its own resource manager first', async () => {
    expect((await put(a, '/api/v1/device/config', { onboarded: { cpu: 0.05, memory: '8MiB' } })).status).toBe(200);
    try {
      // A job of a's own: the reply to its reservation tells a's scheduler what the share is.
      const here = await post(a, { name: 'here', image: 'none', executor: 'null', resources: { cpu: 0.01, memory: '1MiB' }, placement: { local: true } });
      expect(await ended(a, here.id)).toMatchObject({ status: 'completed' });
      const reservedHere = await envelopes(a, '/dms/resources/reserve');
      const { id } = await post(a, { name: 'beyond-the-share', image: 'none', executor: 'null', resources: { cpu: 0.1, memory: '16MiB' } });
      expect(await ended(a, id)).toMatchObject({ status: 'completed', node: b.peerId });
      expect(await envelopes(a, '/dms/resources/reserve')).toBe(reservedHere);
    } finally {
      expect((await put(a, '/api/v1/device/config', { onboarded: null })).status).toBe(200);
    }
  });

  it("builds no machine for the reserve: the provider's deployment machine was made once, when it started", async () => {
    // provide() builds a whole machine again (every state node and transition): about a
    // millisecond on each reserve's path when it was called per job.
    const provide = vi.spyOn(providerMachine, 'provide');
    try {
      const { id } = await post(a, { name: 'no-provide', image: 'none', executor: 'null', resources: { cpu: 0.1, memory: '16MiB' }, placement: { node: b.peerId } });
      expect(await ended(a, id)).toMatchObject({ status: 'completed', node: b.peerId });
      expect(provide).not.toHaveBeenCalled();
    } finally {
      provide.mockRestore();
    }
  });

  it('refused at its start, fails naming why on its last placement, and leaves nothing held there', async () => {
    const { id } = await post(a, { name: 'refused', image: 'localhost:5000/app', executor: 'null', resources: { cpu: 0.1, memory: '16MiB' }, placement: { node: b.peerId } });
    const done = await ended(a, id);
    expect(done.status).toBe('failed');
    expect(done.error).toContain(`node ${b.peerId} could not start it`);
    expect(done.error).toContain('localhost:5000');
    // Every placement was a lease refused its start, each recorded as an attempt on b.
    expect(done.attempts.length).toBeGreaterThanOrEqual(1);
    expect(done.attempts.every((t) => t.node === b.peerId && t.outcome === 'refused')).toBe(true);
    await waitFor('nothing held on b', async () => (await heldCores(b)) === 0 || undefined, { timeoutMs: 10_000 });
    expect(await envelopes(b, '/dms/deployment/start')).toBe(0);
  });
});

describe('a provider whose reserve takes no start (an earlier release)', { timeout: 40_000 }, () => {
  let old: ForeignPeer;
  const received: Envelope[] = [];
  beforeAll(async () => {
    old = await ForeignPeer.connectedTo(a);
    old.transport.subscribe(DEPLOYMENT_TOPIC);
    await waitFor('the old provider in the deployment mesh', () => old.transport.topicPeers(DEPLOYMENT_TOPIC).length > 0 || undefined, { timeoutMs: 15_000, intervalMs: 50 });
    answerAsProvider(
      old,
      (env) => received.push(env),
      (be, body) => {
        // What a strict schema without `start` answered.
        if (be === '/dms/deployment/reserve') return 'start' in body ? { kind: 'invalid', error: 'payload: Unrecognized key: "start"' } : { until: new Date(Date.now() + 60_000).toISOString() };
        if (be === '/dms/deployment/start') return { job_id: body.job.id };
        if (be === '/dms/deployment/logs') return { id: body.id, status: 'completed', exit_code: 0, error: null, pending_reason: null, chunks: [], next: 0, more: false, done: true };
        return undefined;
      },
    );
  }, 30_000);
  afterAll(() => old?.stop());

  const bidsAbout = (id: string) => received.filter((e) => e.be === '/dms/deployment/bid' && JSON.stringify(decodePayload(e.msg)).includes(id));

  it('is asked for its bid directly by a requester with few peers, not through the topic', async () => {
    // More than a's whole machine, and more than b offers: only the old provider bids for it.
    const { id } = await post(a, { name: 'asked-directly', image: 'none', executor: 'null', resources: { cpu: 3, memory: '16MiB' } });
    const [bid] = await waitFor('the bid request for the job', () => (bidsAbout(id).length ? bidsAbout(id) : undefined), { timeoutMs: 10_000, intervalMs: 20 });
    expect(bid.to.addr).toEqual({ host: old.host, inbox: 'deployment' });
    expect(bid.opt.topic).toBeUndefined();
    expect(bid.from.addr.host).toBe(a.peerId);
    await ended(a, id);
  });

  it('hears the offer on the topic from a requester that offers there only (direct_bid_peers 0)', async () => {
    // More than b offers: offered to the network. Only the request is of interest here.
    const { id } = await post(b, { name: 'on-the-topic', image: 'none', executor: 'null', resources: { cpu: 3, memory: '16MiB' } });
    const [bid] = await waitFor('the bid request for the job, relayed by a', () => (bidsAbout(id).length ? bidsAbout(id) : undefined), { timeoutMs: 10_000, intervalMs: 20 });
    expect(bid.opt.topic).toBe(DEPLOYMENT_TOPIC);
    expect(bid.from.addr.host).toBe(b.peerId);
    expect((await fetch(`${b.url}/api/v1/jobs/${id}`, { method: 'DELETE' })).status).toBeLessThan(300);
  });

  it('is asked again without the start, then sent the start as a second step', async () => {
    const { id } = await post(a, { name: 'two-steps', image: 'none', executor: 'null', resources: { cpu: 0.1, memory: '16MiB' }, placement: { node: old.host } });
    const done = await ended(a, id);
    expect(done).toMatchObject({ status: 'completed', node: old.host });
    const about = received.filter((e) => JSON.stringify(decodePayload(e.msg)).includes(id)).map((e) => e.be);
    expect(about.filter((be) => be !== '/dms/deployment/bid' && be !== '/dms/deployment/logs')).toEqual([
      '/dms/deployment/reserve',
      '/dms/deployment/reserve',
      '/dms/deployment/start',
    ]);
    const reserves = received.filter((e) => e.be === '/dms/deployment/reserve' && JSON.stringify(decodePayload(e.msg)).includes(id)).map((e) => decodePayload(e.msg) as object);
    expect(reserves.map((r) => 'start' in r)).toEqual([true, false]);
  });
});
