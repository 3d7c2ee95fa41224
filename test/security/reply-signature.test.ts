import { afterAll, beforeAll, describe, expect, it, onTestFinished } from 'vitest';
import { DEPLOYMENT_TOPIC } from '../../behaviors/jobs/deployment.js';
import { msToNs, nextNonce, nowNs } from '../../runtime/time.js';
import { decodePayload, encodePayload, type Envelope, parseEnvelope } from '../../runtime/wire/envelope.js';
import { post } from '../helpers/envelopes.js';
import { waitFor } from '../helpers/network.js';
import { type NodeProcess, removeHome, startNode } from '../helpers/node.js';
import { ForeignPeer } from '../helpers/peer.js';

/**
 * A reply is an envelope like any other: its signature is checked where it enters, whichever
 * waiter it names. A reply whose signature does not verify is not delivered, not to an invoke's
 * waiter and not to the requester collecting bids; and a bid counts for the node that signed
 * and sent it only, never for another node it names.
 */

let node: NodeProcess;
let asked: ForeignPeer;
/** A second foreign peer that never bids: the node a spoofed bid claims to be. */
let bystander: ForeignPeer;

beforeAll(async () => {
  node = await startNode({});
  [asked, bystander] = await Promise.all([ForeignPeer.connectedTo(node), ForeignPeer.connectedTo(node)]);
  asked.transport.subscribe(DEPLOYMENT_TOPIC);
}, 60_000);
afterAll(async () => {
  await asked?.stop();
  await bystander?.stop();
  await node?.stop();
  if (node) removeHome(node.home);
});

/** A reply to `request` from `asked`, signed by it. */
const replyTo = (request: Envelope, payload: unknown): Envelope => asked.replyTo(request, payload);

/** `signed` with its payload swapped after signing: the same sender, a signature that no longer verifies. */
const tampered = (signed: Envelope, payload: unknown): Envelope => ({ ...signed, msg: encodePayload(payload) });

describe('a reply whose signature does not verify', () => {
  it('is not delivered to the invoke waiting for it; the genuine reply after it is', { timeout: 30_000 }, async () => {
    const cont = `/private/r/sig-${Date.now()}`;
    const exp = nowNs() + msToNs(15_000);
    const body = `{"to":{"addr":{"host":"${asked.host}","inbox":"root"}},"be":"/public/hello","from":{"addr":{"host":"${node.peerId}","inbox":"caller"}},"nonce":${nextNonce()},"opt":{"exp":${exp},"cont":"${cont}"},"msg":"e30="}`;
    const call = post(`${node.url}/api/v1/actor/invoke`, body);
    // What the invoke answered and who is connected to whom, should the request not come.
    let answered = 'the invoke has not answered';
    void call.then((r) => (answered = `the invoke answered ${r.status}: ${r.text.slice(0, 300)}`), (e: unknown) => (answered = `the invoke failed: ${String(e)}`));
    const explain = async () => {
      const nodePeers = await fetch(`${node.url}/api/v1/peers`).then((r) => r.text(), (e: unknown) => `(unreadable: ${String(e)})`);
      return `${answered}; the asked peer (${asked.host}) received ${asked.arrived.map((e) => e.be).join(', ') || 'nothing'} and is connected to ${asked.transport.peers().join(', ') || 'nobody'}; the node (${node.peerId}) lists as peers ${nodePeers.slice(0, 600)}`;
    };
    const req = await waitFor('the request at the asked peer', () => asked.arrived.find((e) => e.opt.cont === cont), { timeoutMs: 10_000, intervalMs: 20, explain });
    // From the peer that was asked, to the right waiter, in time: only the signature is wrong.
    await asked.send(tampered(replyTo(req, { did: 'did:key:genuine' }), { did: 'did:key:forged' }));
    // Time for the forged reply to be taken, were it taken, before the genuine one is sent.
    await new Promise((r) => setTimeout(r, 500));
    await asked.send(replyTo(req, { did: 'did:key:genuine' }));
    const r = await call;
    expect(r.status, r.text).toBe(200);
    expect(decodePayload(parseEnvelope(r.text).msg)).toEqual({ did: 'did:key:genuine' });
  });
});

/**
 * A job only a foreign peer could bid for (more cores than this machine has: it is offered to
 * the network; no labels, so no signed profile is asked of the bidder), and the means to answer its offers.
 */
async function offeredJob() {
  const res = await fetch(`${node.url}/api/v1/jobs`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ name: 'bid-me', image: 'none', executor: 'null', resources: { cpu: 256, memory: '64MiB' } }),
  });
  expect(res.status).toBe(201);
  const { id } = (await res.json()) as { id: string };
  onTestFinished(async () => void (await fetch(`${node.url}/api/v1/jobs/${id}`, { method: 'DELETE' })));
  const forJob = (e: Envelope) => (decodePayload(e.msg) as any).jobs?.some((j: any) => j.job_id === id) || (decodePayload(e.msg) as any).job_id === id;
  const bidRequests = () => asked.arrived.filter((e) => e.be === '/dms/deployment/bid' && forJob(e));
  const reservesAt = (peer: ForeignPeer) => peer.arrived.filter((e) => e.be === '/dms/deployment/reserve' && forJob(e));
  return {
    id,
    reservesAt,
    /** A bid for the job answering `req`, from the asked peer, speaking for `node`. */
    bid: (req: Envelope, node: string) => {
      const offer = (decodePayload(req.msg) as any).jobs.find((j: any) => j.job_id === id);
      return replyTo(req, { node, answers: [{ job_id: id, free: offer.resources, load: 0, executors: ['null'] }] });
    },
    /** The n-th bid request for the job, or 'reserve' should a reserve (at the asked peer or the bystander) come first. */
    next: (n: number) =>
      waitFor(
        `bid request ${n} for job ${id}, or a reserve`,
        (): Envelope | 'reserve' | false => (reservesAt(asked).length || reservesAt(bystander).length ? 'reserve' : (bidRequests()[n - 1] ?? false)),
        { timeoutMs: 12_000, intervalMs: 20 },
      ),
  };
}

describe('bids', () => {
  it('a bid whose signature does not verify is dropped: no reserve follows, the job is offered again', { timeout: 30_000 }, async () => {
    const job = await offeredJob();
    const first = await job.next(1);
    expect(first).not.toBe('reserve');
    await asked.send(tampered(job.bid(first as Envelope, asked.host), { node: asked.host, answers: [{ job_id: job.id, free: { cpu: { cores: 64 }, memory: { size: 2 ** 40 }, storage: { size: 0 } }, load: 0, executors: ['null'] }] }));
    // Had it been taken, the reserve would go out as the window closes (at most 500 ms), before the next offer (1 s on).
    expect(await job.next(2), 'a reserve followed the forged bid').not.toBe('reserve');
  });

  it('a bid signed and sent by one peer that names another node is dropped: no reserve at either', { timeout: 30_000 }, async () => {
    const job = await offeredJob();
    const first = await job.next(1);
    expect(first).not.toBe('reserve');
    await asked.send(job.bid(first as Envelope, bystander.host));
    expect(await job.next(2), 'a reserve followed the bid naming another node').not.toBe('reserve');
    expect(job.reservesAt(bystander)).toEqual([]);
  });

  it('control: a genuine bid from the same peer, for itself, is reserved on directly', { timeout: 30_000 }, async () => {
    const job = await offeredJob();
    const first = await job.next(1);
    expect(first).not.toBe('reserve');
    await asked.send(job.bid(first as Envelope, asked.host));
    const reserve = await waitFor('a reserve at the asked peer', () => job.reservesAt(asked)[0], { timeoutMs: 10_000, intervalMs: 20 });
    expect(reserve.to.addr.host).toBe(asked.host);
    expect(job.reservesAt(bystander)).toEqual([]);
  });
});
