/**
 * What a stranger on the network can and cannot do with a node's deployment behaviors, against
 * a real node process: it may bid-ask and reserve only where the operator offers a share, it
 * can never hand the orchestrator a job directly, and it can neither read nor stop a job another
 * node placed there. (The REST `operator` role and the hand-over:
 * test/security/rest-hardening.test.ts.)
 */
import { randomUUID } from 'node:crypto';
import ipaddr from 'ipaddr.js';
import { afterAll, beforeAll, describe, expect, it, onTestFinished } from 'vitest';
import { nonPublicReason } from '../../actors/orchestrator/registries.js';
import { DmsClient } from '../../client/client.js';
import { KeyPair } from '../../runtime/crypto/keys.js';
import { decodePayload } from '../../runtime/wire/envelope.js';
import { waitFor } from '../helpers/network.js';
import { type LocalNode, startLocalNode } from '../helpers/local-node.js';
import { privateNameHere } from '../helpers/private-name.js';
import { ForeignPeer, type StrangerScene, strangerBesideTwoNodes } from '../helpers/peer.js';
import { gate } from '../helpers/required.js';

let scene: StrangerScene<LocalNode> | undefined;
let a: LocalNode;
let b: LocalNode;
let peer: ForeignPeer;

const put = (node: LocalNode, path: string, body: unknown) =>
  fetch(`${node.url}${path}`, { method: 'PUT', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
const usage = async (node: LocalNode) => (await (await fetch(`${node.url}/api/v1/resources/usage`)).json()) as { allocated: { cpu: { cores: number } } };

const statusOnA = async (id: string) => (await (await fetch(`${a.url}/api/v1/jobs/${id}`)).json()) as { status: string };

/** A long null job node b places on node a, once it runs there: its id. */
async function placedByB(): Promise<string> {
  const res = await fetch(`${b.url}/api/v1/jobs`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ name: 'placed', image: 'none', executor: 'null', environment: { DMS_NULL_DURATION_MS: '60000' }, placement: { node: a.peerId } }),
  });
  expect(res.status).toBe(201);
  const { id } = (await res.json()) as { id: string };
  await waitFor('the job running on node a', async () => (await statusOnA(id)).status === 'running');
  return id;
}

/** Sends `be` to node `a`'s `inbox` from the foreign peer and returns the reply's payload. */
async function ask(inbox: string, be: string, payload: unknown): Promise<any> {
  const cont = `/private/r/${randomUUID()}`;
  await peer.send(peer.envelope(a, { be, inbox, cont, payload }));
  return decodePayload((await peer.waitReply(cont)).msg);
}

beforeAll(async () => {
  scene = await strangerBesideTwoNodes({ start: startLocalNode });
  ({ a, b, peer } = scene);
}, 120_000);
afterAll(() => scene?.stop());

const here = await privateNameHere();
gate('the private registry name test', here === null ? `this machine's name does not resolve to a private address (add it to /etc/hosts)` : null, 'DMS_REQUIRE_PRIVATE_NAME');

const resources = { cpu: { cores: 0.5 }, memory: { size: 64 * 1024 * 1024 }, storage: { size: 0 } };

describe('deployment behaviors and strangers', { timeout: 60_000 }, () => {
  it('a payload with a __proto__ key, which the schema would drop without a word, gets an error reply naming it', async () => {
    const payload = JSON.parse(`{"jobs":[{"job_id":"${randomUUID()}","resources":${JSON.stringify(resources)},"executor":"null","labels":{"__proto__":"x"}}]}`);
    expect(await ask('deployment', '/dms/deployment/bid', payload)).toMatchObject({ kind: 'invalid', error: expect.stringContaining('a key named __proto__ is not accepted') });
  });

  it('a node without an onboarded share declines to bid and refuses to reserve', async () => {
    const job_id = randomUUID();
    const bids = await ask('deployment', '/dms/deployment/bid', { jobs: [{ job_id, resources, executor: 'null' }] });
    expect(bids).toEqual({ node: a.peerId, answers: [{ job_id, declined: 'offers nothing to the network (no onboarded share)' }] });
    const reserve = await ask('deployment', '/dms/deployment/reserve', { job_id, resources, lease_ms: 10_000 });
    expect(reserve).toMatchObject({ kind: 'forbidden' });
    expect((await usage(a)).allocated.cpu.cores).toBe(0);
  });

  it('a reservation nobody starts ends with its lease; a start by another node than the reserver is refused', async () => {
    expect((await put(a, '/api/v1/device/config', { onboarded: { cpu: 1, memory: '1GiB' } })).status).toBe(200);
    const job_id = randomUUID();
    await ask('deployment', '/dms/deployment/bid', { jobs: [{ job_id, resources, executor: 'null' }] });
    expect(await ask('deployment', '/dms/deployment/reserve', { job_id, resources, lease_ms: 1_000 })).toHaveProperty('until');
    expect((await usage(a)).allocated.cpu.cores).toBe(0.5);
    // Node b never reserved it: its start is refused, whatever job it names.
    const job = { id: job_id, name: 'x', image: 'none', executor: 'null' };
    const started = await new DmsClient({ url: b.url, timeoutMs: 10_000 }).invoke<{ error?: string }>(
      { host: a.peerId, inbox: 'deployment' },
      '/dms/deployment/start',
      { job },
      { raw: true },
    );
    expect(started.payload).toMatchObject({ kind: 'conflict' });
    await waitFor('the lease to run out', async () => (await usage(a)).allocated.cpu.cores === 0, { timeoutMs: 10_000 });
  });

  it.skipIf(here === null)("a job whose registry name resolves to this node's private network is refused at start, by this node's own lookup", async () => {
    expect((await put(a, '/api/v1/device/config', { onboarded: { cpu: 1, memory: '1GiB' } })).status).toBe(200);
    // A stranger of its own: the one before let a lease run out, and is barred from reserving for a while.
    const first = peer;
    const fresh = (peer = await ForeignPeer.connectedTo(a));
    onTestFinished(async () => {
      peer = first;
      await fresh.stop();
    });
    // The requester's lookup (here: none at all, a stranger's) proves nothing about the names
    // the provider's engine would pull from.
    const job_id = randomUUID();
    await ask('deployment', '/dms/deployment/bid', { jobs: [{ job_id, resources, executor: 'null' }] });
    expect(await ask('deployment', '/dms/deployment/reserve', { job_id, resources, lease_ms: 2_000 })).toHaveProperty('until');
    const image = `${here!.name}:5000/x`;
    const started = await ask('deployment', '/dms/deployment/start', { job: { id: job_id, name: 'x', image, executor: 'null', resources } });
    expect(started).toEqual({
      kind: 'invalid',
      error: `image: registry ${image.split('/')[0]} resolves to ${nonPublicReason(ipaddr.parse(here!.addresses[0]))}, a non-public address; list it in jobs.allowed_registries to pull from it`,
    });
    expect((await fetch(`${a.url}/api/v1/jobs/${job_id}`)).status).toBe(404);
    await waitFor('the lease to run out', async () => (await usage(a)).allocated.cpu.cores === 0, { timeoutMs: 10_000 });
  });

  it('a stranger cannot hand the orchestrator a job, nor read or stop a job another node placed', async () => {
    const handed = await ask('orchestrator', '/dms/job/accept', { job: { id: randomUUID(), name: 'x', image: 'none', executor: 'null' }, requester: peer.host });
    expect(handed).toEqual({ error: `capability /dms/internal/deployment not granted to ${peer.key.did}`, kind: 'forbidden' });
    // Node b places a long job on node a.
    const id = await placedByB();
    expect(await ask('deployment', '/dms/deployment/logs', { id })).toEqual({ error: `job ${id} not found`, kind: 'not_found' });
    expect(await ask('deployment', '/dms/deployment/cancel', { id })).toEqual({ error: `job ${id} not found`, kind: 'not_found' });
    expect(((await (await fetch(`${a.url}/api/v1/jobs/${id}`)).json()) as { status: string }).status).toBe('running');
    expect((await fetch(`${b.url}/api/v1/jobs/${id}`, { method: 'DELETE' })).status).toBe(200);
    // Ended, it is remembered for the node that placed it (its follower's last read), still for no one else.
    await waitFor('the job ended on node a', async () => ((await (await fetch(`${a.url}/api/v1/jobs/${id}`)).json()) as { status: string }).status === 'failed');
    expect(await ask('deployment', '/dms/deployment/logs', { id })).toEqual({ error: `job ${id} not found`, kind: 'not_found' });
  });

  it("a cancel of a run its requester gave up before the job was placed here again stops no newer run", async () => {
    // Node b places a long job on node a, then asks a cancel of a run given up a minute ago, as
    // its outbox of missed cancels asks again after the job was placed there anew.
    const id = await placedByB();
    const status = async () => (await statusOnA(id)).status;
    const asB = new DmsClient({ url: b.url, timeoutMs: 10_000 });
    const cancel = (given_up_ms: number) =>
      asB.invoke<{ kind?: string; error?: string; status?: string }>({ host: a.peerId, inbox: 'deployment' }, '/dms/deployment/cancel', { id, reason: 'given up', given_up_ms }, { raw: true });
    expect((await cancel(60_000)).payload).toMatchObject({ kind: 'conflict', error: expect.stringContaining(`job ${id} was placed here again after its requester gave the run before up`) });
    expect(await status()).toBe('running');
    // Given up since it was placed: that is this run, and it stops.
    expect((await cancel(0)).payload).toMatchObject({ status: 'failed', error: 'cancelled: given up' });
  });

  it('a REST caller with a key of its own cannot deploy here as the node (its envelope names this node)', async () => {
    const stranger = KeyPair.generate();
    const client = new DmsClient({ url: a.url, key: stranger, timeoutMs: 10_000 });
    const job_id = randomUUID();
    let text: string;
    try {
      const reply = await client.invoke({ inbox: 'deployment' }, '/dms/deployment/reserve', { job_id, resources, lease_ms: 10_000 }, { raw: true });
      text = JSON.stringify(reply.payload);
    } catch (e) {
      text = String(e);
    }
    expect(text).toContain('deployment requests naming this node come from its own actors only');
    expect((await usage(a)).allocated.cpu.cores).toBe(0);
  });
});
