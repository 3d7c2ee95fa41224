/**
 * A provider signs the manifest of a job it ran, and may sign what it likes: the requester
 * keeps it only when it lists the outputs the job asked for, since their names become folder
 * names on the requester's disk (`dms jobs get`). The provider is a libp2p peer that bids,
 * reserves, starts, reports the job completed and answers for its manifest; the requester is
 * a node in process (the check is the node's, not its process's).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { emptyFile, fileOf256GiB, holdBlocks, repeatingDir } from '../helpers/dag.js';
import { DEPLOYMENT_TOPIC } from '../../behaviors/jobs/deployment.js';
import { type Manifest, signManifest } from '../../behaviors/jobs/manifest.js';
import { decodePayload } from '../../runtime/wire/envelope.js';
import { type LocalNode, startLocalNode } from '../helpers/local-node.js';
import { waitFor } from '../helpers/network.js';
import { ForeignPeer } from '../helpers/peer.js';
import { rest } from '../helpers/rest.js';
import { runCli } from '../helpers/node.js';

let requester: LocalNode;
let provider: ForeignPeer;
/** The error the provider says a job failed with (completed when none). */
const failures = new Map<string, string>();
/** The outputs the provider's manifest lists, per job. */
const listed = new Map<string, Manifest['outputs']>();
/** Jobs whose first manifest request the provider leaves unanswered (a reply lost, a provider busy for a moment). */
const silentOnce = new Set<string>();
const A_CID = 'bafkreigh2akiscaildcqabsyg3dfr6chu3fgpregiymsck7e7aqa4s52zy';

beforeAll(async () => {
  requester = await startLocalNode();
  provider = await ForeignPeer.connectedTo(requester);
  provider.transport.subscribe(DEPLOYMENT_TOPIC);
  await waitFor('the provider in the deployment mesh', () => provider.transport.topicPeers(DEPLOYMENT_TOPIC).length > 0, { timeoutMs: 15_000, intervalMs: 50 });
  provider.transport.onEnvelope((env) => {
    if (!env.opt.cont) return;
    const body = decodePayload(env.msg) as any;
    const answer = (payload: unknown, inbox = 'deployment') => void provider.send(provider.replyTo(env, payload, inbox)).catch(() => undefined);
    if (env.be === '/dms/deployment/bid') answer({ node: provider.host, answers: body.jobs.map((j: any) => ({ job_id: j.job_id, free: j.resources, load: 0, executors: ['null'] })) });
    else if (env.be === '/dms/deployment/reserve') answer({ until: new Date(Date.now() + 60_000).toISOString() });
    else if (env.be === '/dms/deployment/start') answer({ job_id: body.job.id });
    else if (env.be === '/dms/deployment/logs') {
      const error = failures.get(body.id);
      answer({ id: body.id, status: error ? 'failed' : 'completed', exit_code: error ? 1 : 0, error: error ?? null, pending_reason: null, chunks: [], next: 0, more: false, done: true });
    } else if (env.be === '/dms/deployment/manifest' && silentOnce.delete(body.job_id)) {
      // Unanswered, this once.
    } else if (env.be === '/dms/deployment/manifest') {
      const manifest: Manifest = {
        job: body.job_id,
        node: provider.host,
        requester: requester.peerId,
        exit_code: 0,
        ended_at: new Date().toISOString(),
        outputs: listed.get(body.job_id) ?? [],
        logs: null,
      };
      void signManifest(manifest, provider.nodeKey).then((signed) => answer({ manifest: signed }, 'outputs'));
    }
  });
}, 60_000);
afterAll(async () => {
  await provider?.stop();
  await requester?.stop();
});

type JobView = { id: string; status: string; error?: string | null; node: string | null; manifest: string | null; outputs: { name: string; path: string; cid?: string }[] };

async function runWith(outputs: (id: string) => Manifest['outputs']): Promise<JobView> {
  const { status, json } = await rest(requester, 'POST', '/api/v1/jobs', {
    name: 'made-elsewhere', image: 'none', executor: 'null', resources: { cpu: 0.5, memory: '64MiB' },
    placement: { node: provider.host }, outputs: [{ name: 'out', path: '/outputs' }],
  });
  expect(status, JSON.stringify(json)).toBe(201);
  listed.set(json.id, outputs(json.id));
  return waitFor(`job ${json.id} ended on its requester`, async () => {
    const job = (await rest(requester, 'GET', `/api/v1/jobs/${json.id}`)).json as JobView;
    return job.status === 'completed' || job.status === 'failed' ? job : undefined;
  }, { timeoutMs: 20_000 });
}

it("keeps a provider's manifest that lists the outputs the job asked for", { timeout: 30_000 }, async () => {
  const job = await runWith(() => [{ name: 'out', path: '/outputs', cid: A_CID, size: 3 }]);
  expect(job, JSON.stringify(job)).toMatchObject({ status: "completed", node: provider.host });
  expect(job.manifest).not.toBeNull();
  expect(job.outputs).toEqual([{ name: 'out', path: '/outputs', cid: A_CID, size: 3 }]);
});

it("asks again for a manifest whose first answer never came: the job ends with it, not without", { timeout: 45_000 }, async () => {
  const job = await runWith((id) => {
    silentOnce.add(id);
    return [{ name: 'out', path: '/outputs', cid: A_CID, size: 3 }];
  });
  expect(job, JSON.stringify(job)).toMatchObject({ status: 'completed', node: provider.host });
  expect(job.manifest).not.toBeNull();
  expect(job.outputs).toEqual([{ name: 'out', path: '/outputs', cid: A_CID, size: 3 }]);
});

describe("an output whose DAG is far larger than its manifest says (the provider's blocks held here already)", () => {
  it('answers 413 for a file of 256 GiB made of one repeated leaf, declared as 3 bytes', { timeout: 30_000 }, async () => {
    const { root, blocks } = fileOf256GiB();
    await holdBlocks(requester.home, blocks);
    const job = await runWith(() => [{ name: 'out', path: '/outputs', cid: root.toString(), size: 3 }]);
    expect(job.manifest).not.toBeNull();
    const res = await fetch(`${requester.url}/api/v1/jobs/${job.id}/outputs/out`);
    expect(res.status).toBe(413);
    expect(((await res.json()) as { error: string }).error).toBe(`output out of job ${job.id}: its DAG makes a file of 256 GiB, where its manifest says 3 B`);
  });

  it('ends the tar of a directory of a million entries made of two repeating blocks, declared as empty, long before', { timeout: 30_000 }, async () => {
    const empty = emptyFile();
    const inner = repeatingDir(empty[0], 1000, 'file');
    const outer = repeatingDir(inner[0], 1000, 'dir');
    await holdBlocks(requester.home, [empty, inner, outer]);
    const job = await runWith(() => [{ name: 'out', path: '/outputs', cid: outer[0].toString(), size: 0 }]);
    const res = await fetch(`${requester.url}/api/v1/jobs/${job.id}/outputs/out`);
    expect(res.status).toBe(200);
    // The tar breaks off: at one entry per 32 bytes of the DAG's blocks (about 35 KB here), some
    // thousand entries of 512-byte headers, not a million.
    let received = 0;
    const reading = (async () => {
      for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) received += chunk.byteLength;
    })();
    await expect(reading).rejects.toThrow();
    expect(received).toBeLessThan(4 * 1024 * 1024);
  });
});

it("prints a provider's words about a job as text, not as terminal commands (dms jobs status)", { timeout: 30_000 }, async () => {
  const { status, json } = await rest(requester, 'POST', '/api/v1/jobs', {
    name: 'words', image: 'none', executor: 'null', resources: { cpu: 0.5, memory: '64MiB' }, placement: { node: provider.host },
  });
  expect(status).toBe(201);
  // Sets the clipboard (OSC 52), clears the screen, writes over the line, reverses what follows.
  failures.set(json.id, 'oops\x1b]52;c;cHduZWQ=\x07\x1b[2J\x1b[Hall good\r\u202Egnp.exe');
  await waitFor(`job ${json.id} failed on its requester`, async () => ((await rest(requester, 'GET', `/api/v1/jobs/${json.id}`)).json.status === 'failed' ? true : undefined), { timeoutMs: 20_000 });
  const shown = await runCli(['--home', requester.home, 'jobs', 'status', json.id]);
  expect(shown.code, shown.stderr).toBe(0);
  expect(shown.stdout).toContain('oops\\u001b]52;c;cHduZWQ=\\u0007\\u001b[2J\\u001b[Hall good\\u000d\\u202egnp.exe');
  expect(shown.stdout).not.toMatch(/[\x1b\x07\r\u202e]/);
});

it('refuses a manifest that renames, adds or drops an output: the job ends without one', { timeout: 60_000 }, async () => {
  for (const outputs of [
    [{ name: 'Documents', path: '/outputs', cid: A_CID, size: 3 }],
    [{ name: 'out', path: '/outputs', cid: A_CID, size: 3 }, { name: 'extra', path: '/etc', cid: A_CID, size: 3 }],
    [{ name: 'out', path: '/elsewhere', cid: A_CID, size: 3 }],
    [],
  ]) {
    const job = await runWith(() => outputs);
    expect(job.status, JSON.stringify(outputs)).toBe('completed');
    expect(job.manifest, JSON.stringify(outputs)).toBeNull();
    expect(job.outputs).toEqual([{ name: 'out', path: '/outputs' }]);
    const { status, json } = await rest(requester, 'GET', `/api/v1/jobs/${job.id}/outputs`);
    expect(status).toBe(404);
    expect(JSON.stringify(json)).toContain('no result manifest');
  }
});
