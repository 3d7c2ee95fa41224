/**
 * A hostile peer among the bidders, against a real requester process (null executor): asked for
 * a bid, it answers the requester's bid request several times with replies as large as an
 * envelope may be, so that the requester's collection of answers (its bound of bytes) fills up
 * with its replies and ends before a genuine provider's bid arrives. Each node answers a bid
 * request once: what one peer sends past its first answer must not cost the others theirs.
 * (A thousand small replies, against the bound of count, is test/unit/kernel.test.ts's
 * "collectReplies": a node takes that many envelopes too slowly for a window of 500 ms.)
 *
 * The genuine provider here is a peer that bids only once the requester has taken the hostile
 * peers' replies (a hello each sent after them on its connection is answered): a node farther
 * away, or busier. It takes the reserve with the job's start and reports the job completed; the
 * requester waits up to 500 ms for such a bid, and must still get it at the first offer.
 */
import { afterAll, beforeAll, describe, expect, it, onTestFinished } from 'vitest';
import { decodePayload } from '../../runtime/wire/envelope.js';
import { ForeignPeer } from '../helpers/peer.js';
import { waitFor } from '../helpers/network.js';
import { type NodeProcess, removeHome, startNode } from '../helpers/node.js';
import { rest } from '../helpers/rest.js';

let n1: NodeProcess;

const job = async (id: string) => (await rest(n1, 'GET', `/api/v1/jobs/${id}`)).json;

/** Flooding peers connected in the test running. */
let flooders = 0;
/** Per job id, how many flooding peers have answered its bid request (all their replies written), and who waits for them all. */
const flooded = new Map<string, { count: number; done: Promise<void>; resolve: () => void }>();
function floodOf(jobId: string) {
  let entry = flooded.get(jobId);
  if (!entry) {
    let resolve!: () => void;
    const done = new Promise<void>((r) => (resolve = r));
    flooded.set(jobId, (entry = { count: 0, done, resolve }));
  }
  return entry;
}

/** A peer that answers every bid request it is sent with `replies(body)`: each a payload it sends to the request's reply address, at once. */
async function flooder(replies: (body: any, peer: ForeignPeer) => unknown[]): Promise<ForeignPeer> {
  const peer = await ForeignPeer.connectedTo(n1);
  flooders++;
  onTestFinished(() => {
    flooders = 0;
    return peer.stop();
  });
  peer.transport.onEnvelope((env) => {
    if (env.be !== '/dms/deployment/bid' || !env.opt.cont) return;
    const body = decodePayload(env.msg) as any;
    const sent = replies(body, peer).map((payload) => peer.send(peer.replyTo(env, payload, 'deployment')).catch(() => undefined));
    // Then a hello, answered once node 1 has taken every reply before it on this connection (in order: one stream, checked inline).
    void Promise.all(sent).then(() => hello(peer)).then(() =>
      body.jobs.forEach((j: any) => {
        const entry = floodOf(j.job_id);
        if (++entry.count >= flooders) entry.resolve();
      }),
    );
  });
  return peer;
}

let hellos = 0;
/** Asks node 1 for its hello and waits for the answer. */
function hello(peer: ForeignPeer): Promise<void> {
  const cont = `/private/hello/${++hellos}`;
  const answered = new Promise<void>((resolve) => peer.transport.onEnvelope((env) => env.be === cont && resolve()));
  void peer.send(peer.envelope(n1, { be: '/public/hello', cont, ttlMs: 10_000 })).catch(() => undefined);
  return Promise.race([answered, sleep(BID_DELAY_MS)]);
}

/** Declines of every job offered, padded to about `pad` bytes. */
const declines = (peer: ForeignPeer, body: any, pad = 0) => ({
  node: peer.host,
  answers: body.jobs.map((j: any) => ({ job_id: j.job_id, declined: 'busy' })),
  ...(pad > 0 ? { pad: 'x'.repeat(pad) } : {}),
});

/**
 * The genuine provider, farther away than the flooding peer: it bids once the flooding peer's
 * replies have been taken by the requester (at most BID_DELAY_MS after it was asked), starts the job with its
 * reserve, and reports it completed.
 */
const BID_DELAY_MS = 400;
const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));
async function slowProvider(): Promise<{ peer: ForeignPeer; reserved: string[] }> {
  const peer = await ForeignPeer.connectedTo(n1);
  onTestFinished(() => peer.stop());
  const reserved: string[] = [];
  peer.transport.onEnvelope((env) => {
    if (!env.opt.cont) return;
    const body = decodePayload(env.msg) as any;
    const answer = (payload: unknown) => void peer.send(peer.replyTo(env, payload, 'deployment')).catch(() => undefined);
    if (env.be === '/dms/deployment/bid') {
      const after = Promise.race([Promise.all(body.jobs.map((j: any) => floodOf(j.job_id).done)), sleep(BID_DELAY_MS)]);
      void after.then(() => answer({ node: peer.host, answers: body.jobs.map((j: any) => ({ job_id: j.job_id, free: j.resources, load: 0.25, executors: ['null'] })) }));
    } else if (env.be === '/dms/deployment/reserve') {
      reserved.push(body.job_id);
      answer({ until: new Date(Date.now() + 10_000).toISOString(), ...(body.start ? { started: true } : {}) });
    } else if (env.be === '/dms/deployment/start') {
      answer({ job_id: body.job.id });
    } else if (env.be === '/dms/deployment/logs') {
      answer({ id: body.id, status: 'completed', exit_code: 0, error: null, pending_reason: null, chunks: [], next: 0, more: false, done: true });
    }
  });
  return { peer, reserved };
}

/** Submits a job node 1 cannot hold and waits for it to be reserved on the slow provider; how long that took (ms). */
async function placedOn(provider: { peer: ForeignPeer; reserved: string[] }): Promise<number> {
  const submitted = Date.now();
  const { status, json } = await rest(n1, 'POST', '/api/v1/jobs', { name: 'flooded', image: 'none', executor: 'null', resources: { cpu: 0.5, memory: '64MiB' } });
  expect(status, JSON.stringify(json)).toBe(201);
  await waitFor(`job ${json.id} reserved on the slow provider`, async () => {
    if (provider.reserved.includes(json.id)) return true;
    const j = await job(json.id);
    throw new Error(`${j.status} ${j.node ?? ''} ${j.pending_reason ?? ''}`);
  }, { timeoutMs: 10_000, intervalMs: 25 });
  const took = Date.now() - submitted;
  const done = await waitFor(`job ${json.id} completed`, async () => ((await job(json.id)).status === 'completed' ? job(json.id) : undefined), { timeoutMs: 10_000 });
  expect(done.node).toBe(provider.peer.host);
  // Placed at its first offer: never waiting for a node in between.
  const { json: history } = await rest(n1, 'GET', `/api/v1/jobs/${json.id}/events`);
  expect(history.events.map((e: any) => e.reason).filter((r: string) => /waiting for a node/.test(r))).toEqual([]);
  return took;
}

beforeAll(async () => {
  n1 = await startNode({ timeoutMs: 45_000 });
  // Node 1 holds none of the jobs here: each is offered to the network.
  expect((await rest(n1, 'PUT', '/api/v1/device/config', { onboarded: { cpu: 0.1, memory: 32 * 1024 * 1024 } })).status).toBe(200);
}, 60_000);
afterAll(async () => {
  await n1?.stop();
  if (n1) removeHome(n1.home);
});

describe("a peer answering a bid request more than once does not crowd out another's bid", { timeout: 60_000 }, () => {
  it('control: one decline, the slow bid is taken at the first offer', async () => {
    const provider = await slowProvider();
    await flooder((body, peer) => [declines(peer, body)]);
    expect(await placedOn(provider)).toBeLessThan(5_000);
  });

  it('one peer, two replies as large as an envelope may be', async () => {
    const provider = await slowProvider();
    await flooder((body, peer) => [0, 1].map(() => declines(peer, body, 530_000)));
    expect(await placedOn(provider)).toBeLessThan(5_000);
  });

  it('two peers, one reply each as large as an envelope may be', async () => {
    const provider = await slowProvider();
    await flooder((body, peer) => [declines(peer, body, 530_000)]);
    await flooder((body, peer) => [declines(peer, body, 530_000)]);
    expect(await placedOn(provider)).toBeLessThan(5_000);
  });
});
