/**
 * What a hostile provider reports about a job it was given, against a real requester process
 * (null executor): the provider is a libp2p peer that bids, takes the reserve with the job's
 * start, and answers the requester's polls (or its start) with what each case says.
 *
 *  - a chunk of output whose time is not a time: the chunk is kept (timed on arrival) and the
 *    run followed on, where the follower once threw ("lost track of its run: Invalid time
 *    value") and the job was lost, its output with it;
 *  - an error text as long as an envelope allows, as the job's end: the requester keeps a bounded
 *    text (the job's error, its attempt, its history), where it once stored every megabyte three
 *    times in the record and each read of the job carried it;
 *  - an error reply of more than 2,000 characters refusing the start, or answering the polls:
 *    the job fails (or is placed again) with a bounded text, where the report of it, past its
 *    schema's bound, was refused whole by the orchestrator and the job stayed pending (or
 *    running) for ever, with every other run reported in the same batch;
 *  - polls answered at once, with nothing new or with output past the requester's cap: paced,
 *    where the requester polled such a provider hundreds of times a second while the job ran.
 */
import { afterAll, beforeAll, describe, expect, it, onTestFinished } from 'vitest';
import { decodePayload } from '../../runtime/wire/envelope.js';
import { ForeignPeer } from '../helpers/peer.js';
import { waitFor } from '../helpers/network.js';
import { type NodeProcess, removeHome, startNode } from '../helpers/node.js';
import { rest } from '../helpers/rest.js';

let n1: NodeProcess;

const job = async (id: string) => (await rest(n1, 'GET', `/api/v1/jobs/${id}`)).json;

/**
 * A provider that bids, leases, and answers each poll with `poll(request, count)` and each start
 * (when the reserve did not carry it) with `start(body)`.
 */
async function provider(o: { poll?: (body: any, n: number) => unknown; start?: (body: any) => unknown; carryStart?: boolean }): Promise<ForeignPeer> {
  const peer = await ForeignPeer.connectedTo(n1);
  onTestFinished(() => peer.stop());
  let polls = 0;
  peer.transport.onEnvelope((env) => {
    if (!env.opt.cont) return;
    const body = decodePayload(env.msg) as any;
    const answer = (payload: unknown) => payload !== undefined && void peer.send(peer.replyTo(env, payload, 'deployment')).catch(() => undefined);
    if (env.be === '/dms/deployment/bid') answer({ node: peer.host, answers: body.jobs.map((j: any) => ({ job_id: j.job_id, free: j.resources, load: 0, executors: ['null'] })) });
    else if (env.be === '/dms/deployment/reserve') {
      // Refusing the start it carries as an older provider would (invalid): it is asked to start as a second step.
      if (body.start && o.carryStart === false) answer({ error: 'unrecognized key: start', kind: 'invalid' });
      else answer({ until: new Date(Date.now() + 10_000).toISOString(), ...(body.start ? { started: true } : {}) });
    } else if (env.be === '/dms/deployment/start') answer(o.start?.(body) ?? { job_id: body.job.id });
    else if (env.be === '/dms/deployment/logs') answer(o.poll?.(body, ++polls));
  });
  return peer;
}

const page = (body: any, p: Record<string, unknown>) => ({ id: body.id, status: 'running', exit_code: null, error: null, pending_reason: null, chunks: [], next: 0, more: false, done: false, ...p });

async function submit(peer: ForeignPeer): Promise<string> {
  const { status, json } = await rest(n1, 'POST', '/api/v1/jobs', { name: 'reported', image: 'none', executor: 'null', resources: { cpu: 0.5, memory: '64MiB' }, placement: { node: peer.host, max_attempts: 1 } });
  expect(status, JSON.stringify(json)).toBe(201);
  return json.id;
}

async function ended(id: string): Promise<any> {
  return waitFor(`job ${id} ended`, async () => {
    const j = await job(id);
    if (j.status !== 'completed' && j.status !== 'failed') throw new Error(`${j.status} ${j.pending_reason ?? ''}`);
    return j;
  }, { timeoutMs: 20_000, intervalMs: 100 });
}

beforeAll(async () => {
  // A provider unanswered (or answering errors) for 1.5 s has lost the run.
  // Its copy of a job's output is cut at 64 KiB, so a provider's output passes the cap in a few polls.
  n1 = await startNode({ timeoutMs: 45_000, config: { deployment: { lost_after_ms: 1_500 }, jobs: { max_log_bytes: 64 * 1024 } } });
  // Node 1 holds none of the jobs here: each is placed on the provider it is pinned to.
  expect((await rest(n1, 'PUT', '/api/v1/device/config', { onboarded: { cpu: 0.1, memory: 32 * 1024 * 1024 } })).status).toBe(200);
}, 60_000);
afterAll(async () => {
  await n1?.stop();
  if (n1) removeHome(n1.home);
});

describe("a hostile provider's reports about a job", { timeout: 40_000 }, () => {
  it('a chunk whose time is not a time: kept, timed on arrival, and the job followed to its end', async () => {
    const peer = await provider({
      poll: (body, n) =>
        n === 1
          ? page(body, { chunks: [{ stream: 'stdout', data: 'first\n', at: 'not a time' }, { stream: 'stdout', data: 'second\n', at: '2026-01-01T00:00:00.000Z' }], next: 10, more: true })
          : page(body, { status: 'completed', exit_code: 0, next: 10, done: true }),
    });
    const id = await submit(peer);
    const done = await ended(id);
    expect(done.status, done.error).toBe('completed');
    const { json: logs } = await rest(n1, 'GET', `/api/v1/jobs/${id}/logs`);
    expect(logs.chunks.map((c: any) => c.data)).toEqual(['first\n', 'second\n']);
    expect(Number.isNaN(Date.parse(logs.chunks[0].at))).toBe(false);
    expect(logs.chunks[1].at).toBe('2026-01-01T00:00:00.000Z');
  });

  it("an error as long as an envelope allows, as the job's end: stored cut to a bounded text", async () => {
    const long = 'E'.repeat(700_000);
    const peer = await provider({ poll: (body) => page(body, { status: 'failed', exit_code: 3, error: long, done: true }) });
    const id = await submit(peer);
    const done = await ended(id);
    expect(done.status).toBe('failed');
    expect(done.error).toMatch(/^E+… \(cut: \d+ more characters\)$/);
    expect(JSON.stringify(await job(id)).length).toBeLessThan(20_000);
    const { json: history } = await rest(n1, 'GET', `/api/v1/jobs/${id}/events`);
    expect(JSON.stringify(history).length).toBeLessThan(20_000);
  });

  it('an error reply as long as an envelope allows, refusing the start: the job fails with a bounded text', async () => {
    const peer = await provider({ carryStart: false, start: () => ({ error: 'R'.repeat(700_000), kind: 'invalid' }) });
    const id = await submit(peer);
    const done = await ended(id);
    expect(done.status).toBe('failed');
    expect(done.error.length).toBeLessThan(2_500);
    expect(JSON.stringify(await job(id)).length).toBeLessThan(20_000);
    const { json: history } = await rest(n1, 'GET', `/api/v1/jobs/${id}/events`);
    expect(JSON.stringify(history).length).toBeLessThan(20_000);
  });

  it('error replies of 3,000 characters to every poll: the run is lost, and the job fails with a bounded text', async () => {
    const peer = await provider({ poll: () => ({ error: 'L'.repeat(3_000), kind: 'unavailable' }) });
    const id = await submit(peer);
    const done = await ended(id);
    expect(done.status).toBe('failed');
    expect(done.error).toMatch(/unreachable.*L+… \(cut: \d+ more characters\)$/);
    expect(done.error.length).toBeLessThan(2_500);
  });

  /** How many polls the provider got in `ms` from the first: a requester polls as fast as it is answered unless it paces. */
  async function pollsIn(ms: number, poll: (body: any, n: number) => unknown): Promise<number> {
    let first = 0;
    let counted = 0;
    const peer = await provider({
      poll: (body, n) => {
        if (n === 1) first = Date.now();
        if (Date.now() - first <= ms) counted = n;
        return poll(body, n);
      },
    });
    const id = await submit(peer);
    await waitFor(`${ms} ms of polls of job ${id}`, () => first > 0 && Date.now() - first > ms, { timeoutMs: ms + 10_000, intervalMs: 50 });
    // The peer stops when the test ends: the run is then lost (lost_after_ms), as in the cases above.
    return counted;
  }

  it('polls answered at once with nothing new: paced, not hundreds a second', async () => {
    // An honest provider holds each poll until there is news or its wait (5 s) is up.
    expect(await pollsIn(2_000, (body) => page(body, {}))).toBeLessThanOrEqual(8);
  });

  it("output past the requester's cap, answered at once: the polls after the cut are paced", async () => {
    const chunk = 'x'.repeat(32 * 1024);
    // Three polls fill the 64 KiB copy; each later one brings more that is dropped.
    const polls = await pollsIn(2_000, (body, n) => page(body, { chunks: [{ stream: 'stdout', data: chunk, at: new Date().toISOString() }], next: n * chunk.length, more: true }));
    expect(polls).toBeLessThanOrEqual(30);
  });
});
