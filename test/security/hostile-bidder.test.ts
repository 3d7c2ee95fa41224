/**
 * A hostile bidder against real node processes (null executor): a libp2p peer that bids
 * idle (load 0) for every job it is offered, takes every reserve and start, reports the jobs
 * it was given as running for ever and ignores cancels. Node 1 is the requester (its share
 * too small for the jobs here); node 2 a genuine provider with the label gpu=a100.
 *
 *  - a job asking for a label goes only to a node whose signed profile shows it;
 *  - a job's `secrets` go only to providers node 1 trusts (its root anchors), and reach a
 *    trusted provider's workload; its plain `environment` goes wherever the job runs (and
 *    with `placement.trust: any`, the secrets too);
 *  - a provider that ignores a cancel loses the job (failed, naming the ignored cancel) after
 *    `placement.cancel_bound_ms`, and is not placed on afterwards; another peer answering the
 *    requester's polls in its place is not heard.
 */
import { afterAll, beforeAll, describe, expect, it, onTestFinished } from 'vitest';
import { DmsClient } from '../../client/client.js';
import { DEPLOYMENT_TOPIC } from '../../behaviors/jobs/deployment.js';
import { didOfPeer } from '../../runtime/crypto/keys.js';
import { decodePayload, type Envelope } from '../../runtime/wire/envelope.js';
import { ForeignPeer } from '../helpers/peer.js';
import { freePort, startCluster, stopCluster, waitFor } from '../helpers/network.js';
import { type NodeProcess, removeHome, runCli, startNode } from '../helpers/node.js';
import { rest } from '../helpers/rest.js';

const CANCEL_BOUND_MS = 1500;
let nodes: NodeProcess[] = [];
let n1: NodeProcess;
let n2: NodeProcess;

async function submit(node: NodeProcess, spec: Record<string, unknown>): Promise<any> {
  const { status, json } = await rest(node, 'POST', '/api/v1/jobs', { name: 'hostile', image: 'none', executor: 'null', resources: { cpu: 0.5, memory: '64MiB' }, ...spec });
  expect(status, JSON.stringify(json)).toBe(201);
  return json;
}

const job = async (node: NodeProcess, id: string) => (await rest(node, 'GET', `/api/v1/jobs/${id}`)).json;

async function until(node: NodeProcess, id: string, check: (j: any) => boolean, what: string, timeoutMs = 30_000): Promise<any> {
  return waitFor(`job ${id} ${what}`, async () => {
    const j = await job(node, id);
    if (!check(j)) throw new Error(`${j?.status} ${j?.node ?? ''} ${j?.pending_reason ?? ''} ${j?.error ?? ''}`);
    return j;
  }, { timeoutMs, intervalMs: 100 });
}

/** The requests for `jobId` the liar received at `be`. */
const got = (liar: ForeignPeer, be: string, jobId: string): Envelope[] =>
  liar.replies(be).filter((e) => JSON.stringify(decodePayload(e.msg)).includes(jobId));

/** A peer that wins every offer and never lets go of what it is given. */
async function liar(requester = n1): Promise<ForeignPeer> {
  const peer = await ForeignPeer.start();
  onTestFinished(() => peer.stop());
  peer.transport.subscribe(DEPLOYMENT_TOPIC);
  await peer.connect(requester);
  await waitFor('the liar in the deployment mesh', () => peer.transport.topicPeers(DEPLOYMENT_TOPIC).length > 0, { timeoutMs: 20_000 });
  peer.transport.onEnvelope((env) => {
    if (!env.opt.cont) return;
    const requester = { peerId: env.from.addr.host } as NodeProcess;
    const answer = (payload: unknown) => void peer.send(peer.envelope(requester, { be: env.opt.cont!, exp: env.opt.exp, inbox: env.from.addr.inbox, payload })).catch(() => undefined);
    const body = decodePayload(env.msg) as any;
    if (env.be === '/dms/deployment/bid') {
      answer({ node: peer.host, answers: body.jobs.map((j: any) => ({ job_id: j.job_id, free: j.resources, load: 0, executors: ['null', 'docker'] })) });
    } else if (env.be === '/dms/deployment/reserve') {
      answer({ until: new Date(Date.now() + 10_000).toISOString() });
    } else if (env.be === '/dms/deployment/start') {
      answer({ job_id: body.job.id });
    } else if (env.be === '/dms/deployment/logs') {
      // Running for ever, whatever it was told; a pause so the requester's follower does not spin.
      const reply = { id: body.id, status: 'running', exit_code: null, error: null, pending_reason: null, chunks: [], next: 0, more: false, done: false };
      setTimeout(() => answer(reply), 300);
    }
    // Cancels are not answered.
  });
  return peer;
}

async function connected(a: NodeProcess, b: NodeProcess): Promise<void> {
  await waitFor(`${a.peerId.slice(-6)} connected to ${b.peerId.slice(-6)}`, async () => (await new DmsClient({ url: a.url, timeoutMs: 5_000 }).peers()).includes(b.peerId), {
    timeoutMs: 30_000,
  });
}

beforeAll(async () => {
  const listen = await Promise.all([0, 1].map(async () => `/ip4/127.0.0.1/tcp/${await freePort()}`));
  nodes = await startCluster(2, {
    node: (i) => ({ env: { DMS_NETWORK_LISTEN_ADDRESSES: listen[i] }, ...(i === 0 ? { config: { placement: { cancel_bound_ms: CANCEL_BOUND_MS } } } : {}) }),
  });
  [n1, n2] = nodes;
  // Node 1 holds none of the jobs here: each is placed on the network.
  expect((await rest(n1, 'PUT', '/api/v1/device/config', { onboarded: { cpu: 0.1, memory: 32 * 1024 * 1024 } })).status).toBe(200);
  expect((await rest(n2, 'PUT', '/api/v1/device/config', { onboarded: { cpu: 2, memory: 2 * 1024 ** 3 }, labels: { gpu: 'a100' } })).status).toBe(200);
  await connected(n1, n2);
}, 120_000);
afterAll(() => stopCluster(nodes));

describe('a hostile bidder', { timeout: 90_000 }, () => {
  it('does not win a job asking for labels its signed profile lacks; a node whose profile has them does', async () => {
    const bad = await liar();
    const pinned = await submit(n1, { placement: { node: bad.host, labels: { gpu: 'a100' } } });
    const waiting = await until(n1, pinned.id, (j) => /published no profile/.test(j.pending_reason ?? ''), 'waiting: the liar has no profile');
    expect(waiting.status).toBe('pending');
    expect(got(bad, '/dms/deployment/reserve', pinned.id)).toEqual([]);
    // Control: the genuine node with the label gets it, the liar bidding idle notwithstanding.
    const open = await submit(n1, { placement: { labels: { gpu: 'a100' } } });
    const done = await until(n1, open.id, (j) => j.status === 'completed', 'completed');
    expect(done.node).toBe(n2.peerId);
    expect(got(bad, '/dms/deployment/bid', open.id).length).toBeGreaterThan(0);
    expect(got(bad, '/dms/deployment/start', open.id)).toEqual([]);
    expect((await rest(n1, 'DELETE', `/api/v1/jobs/${pinned.id}`)).status).toBe(200);
  });

  it('never receives secrets; plain environment goes where the job runs; a trusted provider gets the secrets and its workload sees them', async () => {
    const bad = await liar();
    const secret = 'API_TOKEN-s3cr3t-value';
    // Plain environment goes to whichever node runs the job, a hostile one too.
    const plain = await submit(n1, { placement: { node: bad.host }, environment: { MODE: 'plain-value' } });
    await until(n1, plain.id, (j) => j.status === 'running', 'running on the liar');
    const [start] = got(bad, '/dms/deployment/start', plain.id);
    expect((decodePayload(start.msg) as any).job.environment).toEqual({ MODE: 'plain-value' });

    // Secrets: not to the liar, pinned or not, nor to node 2 while node 1 does not anchor it.
    const pinned = await submit(n1, { placement: { node: bad.host }, secrets: { DMS_NULL_STDOUT: secret } });
    await until(n1, pinned.id, (j) => /not trusted with secrets/.test(j.pending_reason ?? ''), 'waiting: the liar is not trusted');
    const open = await submit(n1, { secrets: { DMS_NULL_STDOUT: secret }, environment: { MODE: 'plain' } });
    await until(n1, open.id, (j) => /not trusted with secrets/.test(j.pending_reason ?? ''), 'waiting: no trusted provider bid');

    // Node 1's operator anchors node 2's DID: node 2 is trusted, gets the job and its secrets.
    expect(didOfPeer(n2.peerId)).toBe(n2.did);
    const anchored = await runCli(['--home', n1.home, 'cap', 'anchor', '--root', n2.did]);
    expect(anchored.code, anchored.stderr).toBe(0);
    const done = await until(n1, open.id, (j) => j.status === 'completed', 'completed on node 2');
    expect(done.node).toBe(n2.peerId);
    const logs = await rest(n1, 'GET', `/api/v1/jobs/${open.id}/logs`);
    expect(logs.json.chunks.map((c: any) => c.data).join('')).toContain(secret);
    // Node 2 keeps no secret in its record: its own operator sees the name only.
    const there = await job(n2, open.id);
    expect(there.secrets).toEqual({ DMS_NULL_STDOUT: '[redacted]' });
    expect(there.environment).toEqual({ MODE: 'plain' });

    // Whatever reached the liar, no secret value was among it.
    for (const env of bad.arrived) expect(Buffer.from(env.msg).toString('latin1')).not.toContain(secret);
    expect(got(bad, '/dms/deployment/reserve', pinned.id)).toEqual([]);
    for (const id of [pinned.id, plain.id]) await rest(n1, 'DELETE', `/api/v1/jobs/${id}`);
  });

  it('with placement.trust any, the same liar is sent the secrets: the setting is what kept them from it', async () => {
    const open = await startNode({ config: { placement: { trust: 'any', cancel_bound_ms: CANCEL_BOUND_MS } } });
    onTestFinished(async () => {
      await open.stop();
      removeHome(open.home);
    });
    const bad = await liar(open);
    const j = await submit(open, { placement: { node: bad.host }, secrets: { API_TOKEN: 'given-away' } });
    await until(open, j.id, (x) => x.status === 'running', 'running on the liar');
    const [start] = got(bad, '/dms/deployment/start', j.id);
    expect((decodePayload(start.msg) as any).job.secrets).toEqual({ API_TOKEN: 'given-away' });
    await rest(open, 'DELETE', `/api/v1/jobs/${j.id}`);
  });

  it('ignoring a cancel: the job fails naming it after the bound, and the node is not placed on again', async () => {
    const bad = await liar();
    const j = await submit(n1, { placement: { node: bad.host } });
    await until(n1, j.id, (x) => x.status === 'running' && x.node === bad.host, 'running on the liar');
    // Another peer answering node 1's polls in the provider's place (it can read the waiter's
    // name off the wire) reports nothing: only the node the job was placed on is heard.
    const forger = await ForeignPeer.connectedTo(n1);
    onTestFinished(() => forger.stop());
    let forged = 0;
    bad.transport.onEnvelope((env) => {
      if (env.be !== '/dms/deployment/logs' || !env.opt.cont) return;
      forged++;
      const done = { id: j.id, status: 'completed', exit_code: 0, error: null, pending_reason: null, chunks: [{ stream: 'stdout', data: 'invented\n', at: new Date().toISOString() }], next: 9, more: false, done: true };
      void forger.send(forger.envelope({ peerId: env.from.addr.host } as NodeProcess, { be: env.opt.cont, exp: env.opt.exp, inbox: env.from.addr.inbox, payload: done })).catch(() => undefined);
    });
    await waitFor('forged answers to three polls', () => forged >= 3, { timeoutMs: 20_000 });
    expect((await job(n1, j.id)).status).toBe('running');
    expect(JSON.stringify((await rest(n1, 'GET', `/api/v1/jobs/${j.id}/logs`)).json)).not.toContain('invented');
    const cancelled = Date.now();
    const res = await rest(n1, 'DELETE', `/api/v1/jobs/${j.id}`);
    expect(res.status, JSON.stringify(res.json)).toBe(200);
    const failed = await until(n1, j.id, (x) => x.status === 'failed', 'failed', 20_000);
    expect(Date.now() - cancelled).toBeGreaterThanOrEqual(CANCEL_BOUND_MS);
    expect(failed.error).toMatch(/cancelled.*ignored the cancel/);
    expect(failed.attempts).toEqual([expect.objectContaining({ node: bad.host, outcome: 'lost', reason: expect.stringMatching(/ignored the cancel/) })]);

    // Excluded: a job pinned to it waits, saying why; an open one goes to node 2.
    const again = await submit(n1, { placement: { node: bad.host } });
    await until(n1, again.id, (x) => /excluded until .*ignored the cancel/.test(x.pending_reason ?? ''), 'waiting: the liar is excluded');
    const open = await submit(n1, {});
    expect((await until(n1, open.id, (x) => x.status === 'completed', 'completed')).node).toBe(n2.peerId);
    expect(got(bad, '/dms/deployment/reserve', again.id)).toEqual([]);
    expect(got(bad, '/dms/deployment/reserve', open.id)).toEqual([]);
    await rest(n1, 'DELETE', `/api/v1/jobs/${again.id}`);
  });
});
