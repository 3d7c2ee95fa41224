/**
 * The job read right (README "Job outputs", "Who reads what"): a job submitted on node A runs on
 * node P; A grants node R's key the job's read right, and R's own REST reads the signed manifest
 * and the outputs from A or from P with it. Without it, with a right for another job or another
 * key, or with one R signed for itself, both A and P refuse, naming why; only A may grant.
 * Revoked on A, a right reads nothing more from A or from P, which A tells (again, once P is
 * back, when it was away); P hears revocations from the job's requester only.
 * In process: three nodes on real libp2p, the null executor (which hands its outputs back).
 */
import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { OUTPUTS_INBOX, OutputsBehaviors, RevokeReply } from '../../behaviors/jobs/manifest.js';
import { MAX_REVOCATIONS_PER_JOB } from '../../behaviors/jobs/read-right.js';
import type { Actor } from '../../runtime/actor.js';
import { at } from '../../runtime/wire/envelope.js';
import { testActor } from '../helpers/actor.js';
import { jobReadCapability } from '../../behaviors/jobs/read-right.js';
import { issueRevocation, issueToken, tokenToText } from '../../runtime/capability/token.js';
import { KeyPair } from '../../runtime/crypto/keys.js';
import { nowNs } from '../../runtime/time.js';
import { type LocalNode, startLocalNode } from '../helpers/local-node.js';
import { listenAddr, startCluster, stopCluster, waitFor } from '../helpers/network.js';
import { tarText } from '../helpers/tar.js';

let a: LocalNode;
let p: LocalNode;
let r: LocalNode;

const json = (method: string, body: unknown) => ({ method, headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });

/** A null job submitted on A, pinned to P, with one output; its id once A holds its manifest. */
async function producedOnP(text: string): Promise<string> {
  const res = await fetch(`${a.url}/api/v1/jobs`, json('POST', {
    name: 'produce', image: 'none', executor: 'null', resources: { cpu: 0.1, memory: '16MiB' }, placement: { node: p.peerId },
    environment: { DMS_NULL_FILES: JSON.stringify({ '/out/a.txt': text }) }, outputs: [{ name: 'out', path: '/out' }],
  }));
  expect(res.status, await res.clone().text()).toBe(201);
  const { id } = (await res.json()) as { id: string };
  await waitFor(`job ${id} completed on P with its manifest on A`, async () => {
    const j = (await (await fetch(`${a.url}/api/v1/jobs/${id}`)).json()) as { status: string; manifest: string | null; node: string };
    return j.status === 'completed' && j.manifest !== null && j.node === p.peerId;
  });
  return id;
}

const grant = async (node: LocalNode, id: string, did: string) => fetch(`${node.url}/api/v1/jobs/${id}/grants`, json('POST', { did }));
const readOn = (id: string, from: LocalNode, token?: string, path = 'outputs') =>
  fetch(`${r.url}/api/v1/jobs/${id}/${path}?from=${from.peerId}`, { headers: token ? { 'x-dms-grant': token } : {} });
const errorOf = async (res: Response) => ((await res.json()) as { error: string }).error;

let job: string;
let other: string;

beforeAll(async () => {
  [a, p, r] = await startCluster(3, { start: startLocalNode });
  const onboard = await fetch(`${p.url}/api/v1/device/config`, json('PUT', { onboarded: { cpu: 1, memory: '1GiB' } }));
  expect(onboard.status).toBe(200);
  job = await producedOnP('granted bytes\n');
  other = await producedOnP('other bytes\n');
}, 120_000);
afterAll(() => stopCluster([a, p, r]));

describe('a job read right', { timeout: 40_000 }, () => {
  it('lets the node it names read the manifest and the outputs from the requester and from the provider', async () => {
    const res = await grant(a, job, r.did);
    expect(res.status, await res.clone().text()).toBe(201);
    const given = (await res.json()) as { token: string; cap: string; did: string };
    expect(given).toMatchObject({ cap: jobReadCapability(job), did: r.did });
    for (const from of [a, p]) {
      const manifest = await readOn(job, from, given.token);
      expect(manifest.status, await manifest.clone().text()).toBe(200);
      expect(await manifest.json()).toMatchObject({ job, node: p.peerId, requester: a.peerId, signed: expect.any(String) });
      const out = await readOn(job, from, given.token, 'outputs/out');
      expect(out.status, await out.clone().text()).toBe(200);
      expect(await tarText(Buffer.from(await out.arrayBuffer()))).toEqual({ 'a.txt': 'granted bytes\n' });
    }
  });

  it('is refused by both without a right, with one for another job or another key, or one the reader signed itself', async () => {
    const forOther = ((await (await grant(a, other, r.did)).json()) as { token: string }).token;
    const forSomeoneElse = ((await (await grant(a, job, KeyPair.generate().did)).json()) as { token: string }).token;
    const selfMade = tokenToText(issueToken(r.node.system.key, { act: 'invoke', aud: r.did, cap: [jobReadCapability(job)], exp: nowNs() + 3_600_000_000_000n }));
    for (const from of [a, p]) {
      for (const [token, says] of [
        [undefined, 'no read right was presented'],
        [forOther, `grants ${jobReadCapability(other)}, not ${jobReadCapability(job)}`],
        [forSomeoneElse, `not to ${r.did}`],
        [selfMade, `issuer ${r.did} is not trusted by this node (wrong issuer)`],
      ] as const) {
        for (const path of ['outputs', 'outputs/out']) {
          const res = await readOn(job, from, token, path);
          expect(res.status).toBe(403);
          const error = await errorOf(res);
          expect(error).toContain(`the manifest of job ${job} is its requester's, and whoever it grants ${jobReadCapability(job)}, only`);
          expect(error).toContain(says);
        }
      }
    }
  });

  it('is granted by the requester only, and bad input gets a 400 naming it', async () => {
    const onProvider = await grant(p, job, r.did);
    expect(onProvider.status).toBe(403);
    expect(await errorOf(onProvider)).toBe(`job ${job} was submitted on node ${a.peerId}: only that node grants reads of it`);
    expect((await grant(a, job, 'did:key:nope')).status).toBe(400);
    expect((await fetch(`${a.url}/api/v1/jobs/${job}/grants`, json('POST', { did: r.did, expiry_s: 10 ** 9 }))).status).toBe(400);
    const junk = await readOn(job, a, 'not a token');
    expect(junk.status).toBe(400);
    expect(await errorOf(junk)).toMatch(/^grant: /);
    const badPeer = await fetch(`${r.url}/api/v1/jobs/${job}/outputs?from=nobody`);
    expect(badPeer.status).toBe(400);
    const long = await readOn(job, a, 'x'.repeat(9 * 1024));
    expect(long.status).toBe(400);
    expect(await errorOf(long)).toBe('x-dms-grant: a read right is at most 8 KiB');
    // Past node:http's own bound on headers, the server answers before any route.
    expect((await readOn(job, a, 'x'.repeat(17 * 1024))).status).toBe(431);
  });
});

describe('revoking a job read right', { timeout: 60_000 }, () => {
  type Given = { token: string; id: string };
  type Revoked = { job: string; revoked: string; revocation: string; provider: { node: string | null; acknowledged: boolean } };
  const given = async (id: string): Promise<Given> => (await (await grant(a, id, r.did)).json()) as Given;
  const revoke = (on: LocalNode, id: string, grantId: string) => fetch(`${on.url}/api/v1/jobs/${id}/grants/${grantId}`, { method: 'DELETE' });
  const refusedBy = async (id: string, from: LocalNode, token: string) => {
    const res = await readOn(id, from, token);
    return res.status === 403 ? errorOf(res) : undefined;
  };

  it('is refused from then on by the requester and by the provider, which the requester tells; other rights still read', async () => {
    const [right, kept] = [await given(job), await given(job)];
    for (const from of [a, p]) expect((await readOn(job, from, right.token)).status).toBe(200);
    const res = await revoke(a, job, right.id);
    expect(res.status, await res.clone().text()).toBe(200);
    const revoked = (await res.json()) as Revoked;
    expect(revoked).toMatchObject({ job, revoked: right.id, provider: { node: p.peerId, acknowledged: true } });
    for (const from of [a, p]) {
      for (const path of ['outputs', 'outputs/out']) {
        const refused = await readOn(job, from, right.token, path);
        expect(refused.status).toBe(403);
        expect(await errorOf(refused)).toContain(`revoked by ${a.did}`);
      }
      expect((await readOn(job, from, kept.token)).status).toBe(200);
    }
    // Revoking again answers the same revocation.
    expect(((await (await revoke(a, job, right.id)).json()) as Revoked).revocation).toBe(revoked.revocation);
    // The requester lists what it gave, the revoked one marked, without the tokens themselves.
    const listed = (await (await fetch(`${a.url}/api/v1/jobs/${job}/grants`)).json()) as { grants: { id: string; did: string; revoked: boolean; provider_acknowledged: boolean | null }[] };
    expect(listed.grants).toContainEqual(expect.objectContaining({ id: right.id, did: r.did, revoked: true, provider_acknowledged: true }));
    expect(listed.grants).toContainEqual(expect.objectContaining({ id: kept.id, revoked: false, provider_acknowledged: null }));
    expect(JSON.stringify(listed)).not.toContain(right.token);
    expect((await fetch(`${p.url}/api/v1/jobs/${job}/grants`)).status).toBe(403);
  });

  it('reaches a provider that was away once it is back', async () => {
    const right = await given(other);
    expect((await readOn(other, p, right.token)).status).toBe(200);
    const home = p.home;
    await p.stop();
    const res = await revoke(a, other, right.id);
    expect(res.status, await res.clone().text()).toBe(200);
    expect(((await res.json()) as Revoked).provider).toEqual({ node: p.peerId, acknowledged: false });
    expect(await refusedBy(other, a, right.token)).toContain(`revoked by ${a.did}`);
    p = await startLocalNode({ home, env: { DMS_NETWORK_BOOTSTRAP_PEERS: listenAddr(a) } });
    // Told again 5 s after the revocation, and 10 s after that if it was not back yet.
    const said = await waitFor('the provider, back, to refuse the revoked right', () => refusedBy(other, p, right.token), { timeoutMs: 30_000 });
    expect(said).toContain(`revoked by ${a.did}`);
  });

  it('is heard by the provider from the job\'s requester only, signed by the key that granted, and at most MAX_REVOCATIONS_PER_JOB of them', async () => {
    const target = await producedOnP('revoked often\n');
    const askP = (caller: Actor, revocation: string) => caller.call(at(OUTPUTS_INBOX, p.peerId), OutputsBehaviors.revoke, { job_id: target, revocation }, RevokeReply);
    const [fromA, fromR] = [await testActor(a.node.system, { inbox: 'revoke-test' }), await testActor(r.node.system, { inbox: 'revoke-test' })];
    const byA = (id = randomBytes(32).toString('hex')) => tokenToText(issueRevocation(a.node.system.key, id, nowNs() + 3_600_000_000_000n));
    await expect(askP(fromR, byA())).rejects.toThrow(`only job ${target}'s requester revokes its read rights`);
    await expect(askP(fromR, tokenToText(issueRevocation(r.node.system.key, 'ab'.repeat(32))))).rejects.toThrow(`only job ${target}'s requester revokes its read rights`);
    await expect(askP(fromA, tokenToText(issueRevocation(KeyPair.generate(), 'ab'.repeat(32))))).rejects.toThrow(/revocation: signed by did:key:\S+, not by did:key:\S+, who granted the job's read rights/);
    await expect(askP(fromA, 'not a token')).rejects.toThrow(/revocation/);
    const grantToken = tokenToText(issueToken(a.node.system.key, { act: 'invoke', aud: r.did, cap: [jobReadCapability(target)], exp: nowNs() + 3_600_000_000_000n }));
    await expect(askP(fromA, grantToken)).rejects.toThrow('revocation: not a revocation');
    await expect(askP(fromA, tokenToText(issueRevocation(a.node.system.key, 'ab'.repeat(32), nowNs() - 1n)))).rejects.toThrow('revocation: it has expired');
    for (let i = 0; i < MAX_REVOCATIONS_PER_JOB; i++) expect(await askP(fromA, byA())).toEqual({ held: true });
    await expect(askP(fromA, byA())).rejects.toThrow(`job ${target} holds ${MAX_REVOCATIONS_PER_JOB} revocations of its read rights already`);
    // The held ones still work: a right revoked among them reads nothing.
    expect((await readOn(target, p, (await given(target)).token)).status).toBe(200);
  });

  it('is refused where the job was not submitted, and bad ids get a 400 naming them', async () => {
    const right = await given(job);
    const onProvider = await revoke(p, job, right.id);
    expect(onProvider.status).toBe(403);
    expect(await errorOf(onProvider)).toBe(`job ${job} was submitted on node ${a.peerId}: only that node revokes reads of it`);
    const badId = await revoke(a, job, 'nope');
    expect(badId.status).toBe(400);
    expect(await errorOf(badId)).toContain('grant id');
    expect((await revoke(a, '00000000-0000-4000-8000-000000000000', right.id)).status).toBe(404);
  });
});
