/**
 * Answers that come too late, or never, from a provider. A start whose answer is late must not
 * run the job twice: the requester asks a provider to start what it reserved and waits a few
 * seconds for the answer; an answer that came later (a slow provider, a lost reply) used to
 * make the requester let the lease go and place the job again, while the provider, which had
 * started it, ran it with no one following. And a reserve whose answer is late must not leave
 * a lease there to run out unstarted, which the provider counts against the requester as it
 * counts a hoarder's.
 *
 * Both sides, each against a libp2p peer playing the other (the checks are the nodes', not
 * their processes'): a requester asks the same provider again, which answers for the job it
 * runs; a provider stops a started job whose requester says it gave up on it (release); a
 * requester releases a reservation it got no answer for.
 */
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DEPLOYMENT_TOPIC } from '../../behaviors/jobs/deployment.js';
import { decodePayload, type Envelope } from '../../runtime/wire/envelope.js';
import { type LocalNode, startLocalNode } from '../helpers/local-node.js';
import { waitFor } from '../helpers/network.js';
import { ForeignPeer } from '../helpers/peer.js';
import { rest } from '../helpers/rest.js';

const MiB = 1024 * 1024;
const nodes: LocalNode[] = [];
const peers: ForeignPeer[] = [];

afterAll(async () => {
  await Promise.all(peers.map((p) => p.stop()));
  await Promise.all(nodes.map((n) => n.stop()));
});

interface ProviderScene {
  requester: LocalNode;
  provider: ForeignPeer;
  /** Each deployment request the provider received, with when (performance.now()). */
  received: { env: Envelope; at: number }[];
  /** Those of behavior `be` about job `jobId`. */
  about(be: string, jobId: string): { env: Envelope; at: number }[];
}

/**
 * A requester node in this process and a libp2p peer in its deployment mesh playing its
 * provider: each request the peer gets is noted, then `answer` may reply (`reply(payload)`).
 */
async function requesterBesideProvider(answer: (scene: ProviderScene, env: Envelope, body: any, reply: (payload: unknown) => void) => void): Promise<ProviderScene> {
  const requester = await startLocalNode();
  nodes.push(requester);
  const provider = await ForeignPeer.connectedTo(requester);
  peers.push(provider);
  provider.transport.subscribe(DEPLOYMENT_TOPIC);
  await waitFor('the provider in the deployment mesh', () => provider.transport.topicPeers(DEPLOYMENT_TOPIC).length > 0, { timeoutMs: 15_000, intervalMs: 50 });
  const received: ProviderScene['received'] = [];
  const scene: ProviderScene = {
    requester,
    provider,
    received,
    about: (be, jobId) => received.filter((r) => r.env.be === `/dms/deployment/${be}` && JSON.stringify(decodePayload(r.env.msg)).includes(jobId)),
  };
  provider.transport.onEnvelope((env) => {
    received.push({ env, at: performance.now() });
    if (!env.opt.cont) return;
    answer(scene, env, decodePayload(env.msg), (payload) => void provider.send(provider.replyTo(env, payload, 'deployment')).catch(() => undefined));
  });
  return scene;
}

/** A null job the scene's requester submits, pinned to its provider: the id it answered. */
async function pinnedJob({ requester, provider }: ProviderScene, name: string): Promise<string> {
  const { status, json } = await rest(requester, 'POST', '/api/v1/jobs', {
    name, image: 'none', executor: 'null', resources: { cpu: 0.5, memory: '64MiB' }, placement: { node: provider.host },
  });
  expect(status, JSON.stringify(json)).toBe(201);
  return json.id as string;
}

/** A bid for every job offered, idle, with exactly the resources asked. */
const idleBid = (provider: ForeignPeer, body: any) => ({ node: provider.host, answers: body.jobs.map((j: any) => ({ job_id: j.job_id, free: j.resources, load: 0, executors: ['null'] })) });

describe('a requester whose start went unanswered', () => {
  let scene: ProviderScene;

  // A provider that starts each job at the first request but answers only the second: to its
  // requester, the first answer is one that came too late.
  beforeAll(async () => {
    scene = await requesterBesideProvider(({ provider, about }, env, body, reply) => {
      if (env.be === '/dms/deployment/bid') reply(idleBid(provider, body));
      else if (env.be === '/dms/deployment/reserve') reply({ until: new Date(Date.now() + 60_000).toISOString() });
      else if (env.be === '/dms/deployment/start' && about('start', body.job.id).length > 1) reply({ job_id: body.job.id });
      else if (env.be === '/dms/deployment/logs') reply({ id: body.id, status: 'completed', exit_code: 0, error: null, pending_reason: null, chunks: [], next: 0, more: false, done: true });
    });
  }, 60_000);

  it('asks the same provider again and follows the job there: one reservation, no release, one attempt', { timeout: 40_000 }, async () => {
    const { requester, provider, received, about } = scene;
    const id = await pinnedJob(scene, 'late-answer');
    const job = await waitFor(`job ${id} ended on its requester`, async () => {
      const j = (await rest(requester, 'GET', `/api/v1/jobs/${id}`)).json;
      return j.status === 'completed' || j.status === 'failed' ? j : undefined;
    }, { timeoutMs: 30_000, explain: () => `the provider received ${received.map((r) => r.env.be).join(', ')}` });
    expect(job, JSON.stringify(job)).toMatchObject({ status: 'completed', node: provider.host });
    expect(job.attempts).toHaveLength(1);
    expect(about('reserve', id)).toHaveLength(1);
    expect(about('start', id)).toHaveLength(2);
    expect(about('release', id)).toHaveLength(0);
    // Both starts name the same job, with the same spec.
    const [first, second] = about('start', id).map((r) => decodePayload(r.env.msg));
    expect(second).toEqual(first);
  });
});

describe('a provider asked again, or let go, after it started a job', { timeout: 40_000 }, () => {
  let provider: LocalNode;
  let requester: ForeignPeer;

  const spec = { cpu: { cores: 0.25 }, memory: { size: 64 * MiB }, storage: { size: 0 } };
  const job = (id: string, ms = 60_000) => ({ id, name: 'x', image: 'none', executor: 'null', environment: { DMS_NULL_DURATION_MS: String(ms) } });

  async function ask(peer: ForeignPeer, be: string, payload: unknown): Promise<any> {
    const cont = `/private/r/${randomUUID()}`;
    await peer.send(peer.envelope(provider, { be: `/dms/deployment/${be}`, inbox: 'deployment', cont, payload }));
    return decodePayload((await peer.waitReply(cont, 10_000)).msg);
  }

  async function reserved(peer: ForeignPeer): Promise<string> {
    const id = randomUUID();
    const bid = await ask(peer, 'bid', { jobs: [{ job_id: id, resources: spec, executor: 'null' }] });
    expect(bid.answers?.[0], JSON.stringify(bid)).toMatchObject({ job_id: id });
    expect(await ask(peer, 'reserve', { job_id: id, resources: spec, lease_ms: 10_000 })).toHaveProperty('until');
    return id;
  }

  const statusOf = async (id: string) => ((await rest(provider, 'GET', `/api/v1/jobs/${id}`)).json as { status: string; error: string | null });

  beforeAll(async () => {
    provider = await startLocalNode();
    nodes.push(provider);
    expect((await rest(provider, 'PUT', '/api/v1/device/config', { onboarded: { cpu: 1, memory: '1GiB' } })).status).toBe(200);
    requester = await ForeignPeer.connectedTo(provider);
    peers.push(requester);
  }, 60_000);

  it('answers a start asked again by its holder with the job it runs, and refuses it to anyone else', async () => {
    const id = await reserved(requester);
    // The second is sent before the first is answered: it finds the job starting or running.
    const [first, again] = await Promise.all([ask(requester, 'start', { job: job(id) }), ask(requester, 'start', { job: job(id) })]);
    expect(first).toEqual({ job_id: id });
    expect(again).toEqual({ job_id: id });
    expect(await ask(requester, 'start', { job: job(id) })).toEqual({ job_id: id });
    const stranger = await ForeignPeer.connectedTo(provider);
    peers.push(stranger);
    expect(await ask(stranger, 'start', { job: job(id) })).toMatchObject({ kind: 'conflict' });
    // Started once: one job, running.
    expect(await statusOf(id)).toMatchObject({ status: 'running' });
    const list = (await rest(provider, 'GET', '/api/v1/jobs')).json as { id: string; attempts: unknown[] }[];
    expect(list.filter((j) => j.id === id).map((j) => j.attempts.length)).toEqual([1]);
    await ask(requester, 'cancel', { id, reason: 'test over' });
  });

  it('answers a start asked again after the job ended with that job, not a second run', async () => {
    const id = await reserved(requester);
    expect(await ask(requester, 'start', { job: job(id, 50) })).toEqual({ job_id: id });
    await waitFor(`job ${id} completed on the provider`, async () => (await statusOf(id)).status === 'completed' || undefined, { timeoutMs: 10_000 });
    expect(await ask(requester, 'start', { job: job(id, 50) })).toEqual({ job_id: id });
    expect(await statusOf(id)).toMatchObject({ status: 'completed' });
    // Anyone else is told nothing of it.
    const stranger = await ForeignPeer.connectedTo(provider);
    peers.push(stranger);
    expect(await ask(stranger, 'start', { job: job(id, 50) })).toMatchObject({ kind: 'conflict', error: expect.stringContaining('holds no reservation of yours') });
  });

  it('refuses a reserve its requester released first (a reserve still under way when its release came), and only its own', async () => {
    const id = randomUUID();
    const bid = await ask(requester, 'bid', { jobs: [{ job_id: id, resources: spec, executor: 'null' }] });
    expect(bid.answers?.[0]).toMatchObject({ job_id: id });
    const stranger = await ForeignPeer.connectedTo(provider);
    peers.push(stranger);
    // Another node's release takes nothing of the bid.
    expect(await ask(stranger, 'release', { job_id: id })).toEqual({});
    expect(await ask(requester, 'release', { job_id: id })).toEqual({});
    expect(await ask(requester, 'reserve', { job_id: id, resources: spec, lease_ms: 10_000 })).toEqual({
      kind: 'conflict',
      error: `this node did not bid for job ${id} lately: ask it with /dms/deployment/bid first`,
    });
    const kept = randomUUID();
    await ask(requester, 'bid', { jobs: [{ job_id: kept, resources: spec, executor: 'null' }] });
    expect(await ask(stranger, 'release', { job_id: kept })).toEqual({});
    expect(await ask(requester, 'reserve', { job_id: kept, resources: spec, lease_ms: 10_000 })).toHaveProperty('until');
    expect(await ask(requester, 'release', { job_id: kept })).toEqual({});
  });

  it('stops a started job its holder releases (the requester gave up on its start), and only for its holder', async () => {
    const id = await reserved(requester);
    expect(await ask(requester, 'start', { job: job(id) })).toEqual({ job_id: id });
    const stranger = await ForeignPeer.connectedTo(provider);
    peers.push(stranger);
    expect(await ask(stranger, 'release', { job_id: id })).toEqual({});
    expect(await statusOf(id)).toMatchObject({ status: 'running' });
    expect(await ask(requester, 'release', { job_id: id })).toEqual({});
    const ended = await waitFor(`job ${id} stopped on the provider`, async () => {
      const s = await statusOf(id);
      return s.status === 'failed' || s.status === 'completed' ? s : undefined;
    }, { timeoutMs: 10_000 });
    expect(ended).toMatchObject({ status: 'failed', error: expect.stringContaining('gave up') });
  });
});

describe('a requester whose reserve went unanswered', () => {
  let scene: ProviderScene;

  // Bids idle for everything, then never answers a reserve: to its requester, a lease it may hold.
  beforeAll(async () => {
    scene = await requesterBesideProvider(({ provider }, env, body, reply) => {
      if (env.be === '/dms/deployment/bid') reply(idleBid(provider, body));
    });
  }, 60_000);

  it('releases it there once it stops waiting, rather than leave it to run out unstarted', { timeout: 30_000 }, async () => {
    const { requester, received, about } = scene;
    const id = await pinnedJob(scene, 'unanswered-reserve');
    const [reserve] = await waitFor('a reserve of the job', () => (about('reserve', id).length ? about('reserve', id) : undefined), { timeoutMs: 10_000, intervalMs: 20 });
    const [release] = await waitFor('the release of what it may have leased', () => (about('release', id).length ? about('release', id) : undefined), {
      timeoutMs: 15_000,
      intervalMs: 20,
      explain: () => `the provider received ${received.map((r) => r.env.be).join(', ')}`,
    });
    expect(decodePayload(release!.env.msg)).toEqual({ job_id: id });
    // Sent when the reserve's wait ended (5 s), not at some later placement.
    expect(release!.at - reserve!.at).toBeGreaterThanOrEqual(4_500);
    expect(release!.at - reserve!.at).toBeLessThan(7_500);
    // Never started there.
    expect(about('start', id)).toEqual([]);
    await rest(requester, 'DELETE', `/api/v1/jobs/${id}`);
  });
});
