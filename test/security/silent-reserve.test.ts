/**
 * A bidder that never answers a reserve, against a real requester process (null executor): it
 * bids idle at once for every job it is offered, and lets each reserve go unanswered. A genuine
 * provider bids 150 ms after it is asked (a node farther away). The first job costs the
 * requester one unanswered reserve (5 s) before it goes to the genuine provider; from then on
 * the liar is suspect (30 s), and the next jobs go to the genuine provider without the liar
 * being asked to reserve. Its instant bid used to close the window (twice its delay) before the
 * genuine bid came, so the suspect was asked anyway, and every job cost 5 s.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { decodePayload } from '../../runtime/wire/envelope.js';
import { ForeignPeer } from '../helpers/peer.js';
import { waitFor } from '../helpers/network.js';
import { type NodeProcess, removeHome, startNode } from '../helpers/node.js';
import { rest } from '../helpers/rest.js';

let n1: NodeProcess;
let liar: ForeignPeer;
let genuine: ForeignPeer;
/** The reserves each peer was asked for, by job id. */
const reserves = new Map<string, string[]>();

function answer(peer: ForeignPeer, honest: boolean): void {
  reserves.set(peer.host, []);
  peer.transport.onEnvelope((env) => {
    if (!env.opt.cont) return;
    const body = decodePayload(env.msg) as any;
    const reply = (payload: unknown) => void peer.send(peer.replyTo(env, payload, 'deployment')).catch(() => undefined);
    if (env.be === '/dms/deployment/bid') {
      const bid = { node: peer.host, answers: body.jobs.map((j: any) => ({ job_id: j.job_id, free: j.resources, load: honest ? 0.25 : 0, executors: ['null'] })) };
      setTimeout(() => reply(bid), honest ? 150 : 0);
    } else if (env.be === '/dms/deployment/reserve') {
      reserves.get(peer.host)!.push(body.job_id);
      // The liar never answers.
      if (honest) reply({ until: new Date(Date.now() + 10_000).toISOString(), ...(body.start ? { started: true } : {}) });
    } else if (env.be === '/dms/deployment/logs' && honest) {
      reply({ id: body.id, status: 'completed', exit_code: 0, error: null, pending_reason: null, chunks: [], next: 0, more: false, done: true });
    }
  });
}

/** Submits a job node 1 cannot hold; how long until the genuine provider was asked to reserve it (ms), and its id. */
async function place(): Promise<{ id: string; took: number }> {
  const began = Date.now();
  const { status, json } = await rest(n1, 'POST', '/api/v1/jobs', { name: 'silent', image: 'none', executor: 'null', resources: { cpu: 0.5, memory: '64MiB' } });
  expect(status, JSON.stringify(json)).toBe(201);
  await waitFor(`job ${json.id} reserved on the genuine provider`, () => reserves.get(genuine.host)!.includes(json.id), { timeoutMs: 15_000, intervalMs: 25 });
  return { id: json.id, took: Date.now() - began };
}

beforeAll(async () => {
  n1 = await startNode({ timeoutMs: 45_000 });
  // Node 1 holds none of the jobs here: each is offered to the network.
  expect((await rest(n1, 'PUT', '/api/v1/device/config', { onboarded: { cpu: 0.1, memory: 32 * 1024 * 1024 } })).status).toBe(200);
  liar = await ForeignPeer.connectedTo(n1);
  genuine = await ForeignPeer.connectedTo(n1);
  answer(liar, false);
  answer(genuine, true);
}, 60_000);
afterAll(async () => {
  await Promise.all([liar?.stop(), genuine?.stop()]);
  await n1?.stop();
  if (n1) removeHome(n1.home);
});

describe('a bidder that never answers a reserve', () => {
  it('costs the first job one unanswered reserve, and the next ones nothing while it is suspect', { timeout: 40_000 }, async () => {
    const first = await place();
    expect(reserves.get(liar.host)).toEqual([first.id]);
    expect(first.took).toBeGreaterThanOrEqual(4_500);
    for (let i = 0; i < 3; i++) {
      const next = await place();
      expect(reserves.get(liar.host)).not.toContain(next.id);
      expect(next.took).toBeLessThan(2_000);
    }
  });
});
