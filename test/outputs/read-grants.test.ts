/**
 * The job read right (README "Job outputs", "Who reads what"): a job submitted on node A runs on
 * node P; A grants node R's key the job's read right, and R's own REST reads the signed manifest
 * and the outputs from A or from P with it. Without it, with a right for another job or another
 * key, or with one R signed for itself, both A and P refuse, naming why; only A may grant.
 * In process: three nodes on real libp2p, the null executor (which hands its outputs back).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { jobReadCapability } from '../../behaviors/jobs/read-right.js';
import { issueToken, tokenToText } from '../../runtime/capability/token.js';
import { KeyPair } from '../../runtime/crypto/keys.js';
import { nowNs } from '../../runtime/time.js';
import { type LocalNode, startLocalNode } from '../helpers/local-node.js';
import { startCluster, stopCluster, waitFor } from '../helpers/network.js';
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
