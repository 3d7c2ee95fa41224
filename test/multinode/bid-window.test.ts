/**
 * `deployment.bid_window_ms`: how long a requester collects bids after an offer. A provider that
 * bids 800 ms after it is asked (a node farther away, or a machine under load, as CI's four
 * clusters at once made node 3 of test/multinode/placement.test.ts) is not heard within the
 * default 500 ms, so the job waits for the next offer, and the next; with the window at 2 s it is
 * placed there. The requester is a node in this process that cannot hold the job itself; the
 * provider is a foreign peer answering by hand.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { decodePayload } from '../../runtime/wire/envelope.js';
import { startLocalNode, type LocalNode } from '../helpers/local-node.js';
import { waitFor } from '../helpers/network.js';
import { ForeignPeer } from '../helpers/peer.js';
import { rest } from '../helpers/rest.js';
import { removeHome } from '../helpers/node.js';

const BID_DELAY_MS = 800;
let node: LocalNode | undefined;
let peer: ForeignPeer | undefined;

afterEach(async () => {
  await peer?.stop();
  await node?.stop();
  if (node) removeHome(node.home);
  node = peer = undefined;
});

/** A node that holds none of the jobs here, with a provider beside it that bids late; the offers and reserves that provider was asked for. */
async function scene(config: object): Promise<{ offers: string[]; reserves: string[] }> {
  node = await startLocalNode({ config: { deployment: { offer_retry_ms: 200, max_offer_backoff_ms: 400, ...config } } });
  expect((await rest(node, 'PUT', '/api/v1/device/config', { onboarded: { cpu: 0.1, memory: 32 * 1024 * 1024 } })).status).toBe(200);
  peer = await ForeignPeer.connectedTo(node);
  const offers: string[] = [];
  const reserves: string[] = [];
  const slow = peer;
  slow.transport.onEnvelope((env) => {
    if (!env.opt.cont) return;
    const body = decodePayload(env.msg) as any;
    const reply = (payload: unknown) => void slow.send(slow.replyTo(env, payload, 'deployment')).catch(() => undefined);
    if (env.be === '/dms/deployment/bid') {
      offers.push(...body.jobs.map((j: any) => j.job_id));
      const bid = { node: slow.host, answers: body.jobs.map((j: any) => ({ job_id: j.job_id, free: j.resources, load: 0, executors: ['null'] })) };
      setTimeout(() => reply(bid), BID_DELAY_MS);
    } else if (env.be === '/dms/deployment/reserve') {
      reserves.push(body.job_id);
      // Refused: the job stays the requester's, whose waiting this test reads.
      reply({ error: 'not this time', kind: 'conflict' });
    }
  });
  return { offers, reserves };
}

const submit = async (n: LocalNode): Promise<string> => {
  const { status, json } = await rest(n, 'POST', '/api/v1/jobs', { name: 'far', image: 'none', executor: 'null', resources: { cpu: 0.5, memory: '64MiB' } });
  expect(status, JSON.stringify(json)).toBe(201);
  return json.id;
};

describe('deployment.bid_window_ms', () => {
  it('by default (500 ms) does not hear a provider that bids 800 ms after the offer: the job waits, offered again and again', { timeout: 20_000 }, async () => {
    const { offers, reserves } = await scene({});
    const id = await submit(node!);
    await waitFor('the job to be offered three times', () => offers.filter((o) => o === id).length >= 3, { timeoutMs: 10_000 });
    // Each bid came 300 ms after its window had closed.
    await new Promise((r) => setTimeout(r, BID_DELAY_MS));
    expect(reserves).toEqual([]);
    const { json } = await rest(node!, 'GET', `/api/v1/jobs/${id}`);
    expect([json.status, json.pending_reason]).toEqual(['pending', expect.stringContaining('no node can hold it now')]);
  });

  it('at 2 s hears it and asks it to reserve', { timeout: 20_000 }, async () => {
    const { reserves } = await scene({ bid_window_ms: 2_000 });
    const id = await submit(node!);
    await waitFor(`job ${id} to be reserved on the late bidder`, () => reserves.includes(id), { timeoutMs: 5_000, intervalMs: 25 });
  });
});
