/**
 * Who hears a requester's answer about its job (/dms/deployment/wanted,
 * actors/deployment/still-wanted.ts): the node the job was placed on, and nobody else. A
 * stranger asking about the job, or any id, is told `unknown`, exactly as for a job that never
 * was, so it learns nothing of other nodes' jobs; a REST caller of the requester (whose
 * envelopes name the node itself) is refused; and a requester closed to deployments
 * (`open_deployment: false`) still answers its providers, whose runs it could not otherwise stop
 * once its cancels were lost.
 */
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DmsClient } from '../../client/client.js';
import { decodePayload } from '../../runtime/wire/envelope.js';
import { waitFor } from '../helpers/network.js';
import { type LocalNode, startLocalNode } from '../helpers/local-node.js';
import { type StrangerScene, strangerBesideTwoNodes } from '../helpers/peer.js';

const WANTED = '/dms/deployment/wanted';
let scene: StrangerScene<LocalNode> | undefined;
let jobId: string;

type Job = { id: string; status: string; node: string | null };

beforeAll(async () => {
  // a places (closed to deployments of others), b runs; the stranger is connected to a.
  scene = await strangerBesideTwoNodes({ start: startLocalNode, node: (i) => ({ config: i === 0 ? { capabilities: { open_deployment: false } } : {} }) });
  const { a, b } = scene;
  const onboarded = await fetch(`${b.url}/api/v1/device/config`, { method: 'PUT', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ onboarded: { cpu: 1, memory: '1GiB' } }) });
  expect(onboarded.status).toBe(200);
  const made = await fetch(`${a.url}/api/v1/jobs`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ name: 'asked-about', image: 'none', executor: 'null', environment: { DMS_NULL_DURATION_MS: '600000' }, resources: { cpu: 0.1, memory: '32MiB' }, placement: { node: b.peerId } }),
  });
  expect(made.status).toBe(201);
  jobId = ((await made.json()) as Job).id;
  await waitFor('the job running on b', async () => {
    const job = (await (await fetch(`${a.url}/api/v1/jobs/${jobId}`)).json()) as Job;
    return job.status === 'running' && job.node === b.peerId;
  }, { timeoutMs: 20_000 });
}, 120_000);
afterAll(() => scene?.stop());

/** Asks a about `job_id` as the stranger; the reply's payload. */
async function strangerAsks(job_id: string): Promise<unknown> {
  const { a, peer } = scene!;
  const cont = `/private/r/${randomUUID()}`;
  await peer.send(peer.envelope(a, { be: WANTED, inbox: 'deployment', cont, payload: { job_id } }));
  return decodePayload((await peer.waitReply(cont, 15_000)).msg);
}

/** Asks `to` about `job_id` from `from`'s node (an envelope of its REST caller, sent on by the node). */
async function nodeAsks(from: LocalNode, to: LocalNode, job_id: string): Promise<unknown> {
  const reply = await new DmsClient({ url: from.url, timeoutMs: 10_000 }).invoke({ host: to.peerId, inbox: 'deployment' }, WANTED, { job_id }, { raw: true });
  return reply.payload;
}

describe('a requester answering whether a job is still wanted', { timeout: 60_000 }, () => {
  it('answers the node the job runs on, though it is closed to deployments', async () => {
    expect(await nodeAsks(scene!.b, scene!.a, jobId)).toEqual({ job_id: jobId, answer: 'following' });
  });

  it('tells a stranger nothing: the job is unknown to it, as an id that never was', async () => {
    expect(await strangerAsks(jobId)).toEqual({ job_id: jobId, answer: 'unknown' });
    const never = randomUUID();
    expect(await strangerAsks(never)).toEqual({ job_id: never, answer: 'unknown' });
  });

  it('a provider has nothing to answer about a job it runs for another node', async () => {
    // Asked of b, the job is one b runs for a: b placed nothing, and has nothing to say.
    expect(await nodeAsks(scene!.a, scene!.b, jobId)).toEqual({ job_id: jobId, answer: 'unknown' });
  });

  it("refuses the requester's own REST callers, whose envelopes name the node itself", async () => {
    const { a } = scene!;
    expect(await nodeAsks(a, a, jobId)).toMatchObject({ kind: 'forbidden' });
  });

  it('answers a bad request with an error naming the field', async () => {
    const { a, peer } = scene!;
    const cont = `/private/r/${randomUUID()}`;
    await peer.send(peer.envelope(a, { be: WANTED, inbox: 'deployment', cont, payload: { job_id: 'not-a-uuid' } }));
    expect(decodePayload((await peer.waitReply(cont, 15_000)).msg)).toMatchObject({ kind: 'invalid', error: expect.stringContaining('job_id') });
  });

  it('the job runs on b all along: the questions stopped nothing', async () => {
    const there = (await (await fetch(`${scene!.b.url}/api/v1/jobs/${jobId}`)).json()) as Job;
    expect(there.status).toBe('running');
  });
});
