/**
 * Job files across three real node processes (README "Job outputs"): a Docker job placed on
 * node 3 leaves 16 MiB of random bytes and a small file; `dms jobs get` on node 1 writes both
 * byte-identical after checking the manifest's signature, and after a kill -9 of a first
 * fetch half-way the second fetches only what was missing; a job on node 2 reads the output as
 * an input; `dms run -i ./data:/inputs` from node 1 runs on node 3 with the local files; node
 * 1 grants node 2 the job's read right, and node 2's `dms jobs get --from` writes the output,
 * until node 1 revokes it: then neither node 1 nor node 3 answers it.
 */
import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openManifest } from '../../behaviors/jobs/manifest.js';
import { DmsClient } from '../../client/client.js';
import { dockerForTests, stopSharingCluster, TEST_IMAGE } from '../helpers/docker.js';
import { waitFor } from '../helpers/network.js';
import { sharingCluster } from '../helpers/sharing-cluster.js';
import { CLI, type NodeProcess, runCli, TEST_ENV } from '../helpers/node.js';

const { docker, problem } = await dockerForTests('job files across nodes');
const MiB = 1024 * 1024;

type JobView = { id: string; status: string; node: string; error: string | null; manifest: string | null; outputs: { name: string; cid?: string; size?: number }[] };

describe.skipIf(problem !== null)('job files across three nodes', { timeout: 240_000 }, () => {
  let nodes: NodeProcess[] = [];
  const scratch = mkdtempSync(join(tmpdir(), 'dms-files-'));

  beforeAll(async () => {
    // Node 1 asks one block at a time: its fetch of 16 MiB takes long enough to be killed half-way.
    nodes = await sharingCluster(3, { node: (i) => (i === 0 ? { config: { blocks: { fetch_in_flight: 1 } } } : {}) });
  }, 120_000);

  afterAll(async () => {
    await stopSharingCluster(docker, nodes);
    rmSync(scratch, { recursive: true, force: true });
  });

  const submit = async (on: NodeProcess, spec: object): Promise<JobView> => {
    const res = await fetch(`${on.url}/api/v1/jobs`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ image: TEST_IMAGE, resources: { cpu: 0.5, memory: '64MiB' }, ...spec }) });
    expect(res.status, await res.clone().text()).toBe(201);
    const { id } = (await res.json()) as { id: string };
    return ended(on, id);
  };
  const ended = (on: NodeProcess, id: string) =>
    waitFor(`job ${id} ended on its requester`, async () => {
      const j = (await (await fetch(`${on.url}/api/v1/jobs/${id}`)).json()) as JobView;
      return j.status === 'completed' || j.status === 'failed' ? j : undefined;
    }, { timeoutMs: 90_000 });
  const stdout = async (on: NodeProcess, id: string) =>
    ((await (await fetch(`${on.url}/api/v1/jobs/${id}/logs`)).json()) as { chunks: { stream: string; data: string }[] }).chunks
      .filter((c) => c.stream === 'stdout')
      .map((c) => c.data)
      .join('');
  const blockFiles = (n: NodeProcess) => readdirSync(join(n.home, 'data', 'blocks'), { recursive: true }).filter((f) => String(f).endsWith('.data')).length;
  const sha = (b: Buffer) => createHash('sha256').update(b).digest('hex');

  let produced: JobView;

  it('runs on node 3; dms jobs get on node 1 writes both files byte-identical, the manifest checked', async () => {
    const [n1, , n3] = nodes;
    produced = await submit(n1, {
      name: 'producer',
      command: 'mkdir -p /outputs/sub && head -c 16777216 /dev/urandom > /outputs/a.bin && echo hello > /outputs/sub/b.txt && sha256sum /outputs/a.bin',
      placement: { node: n3.peerId },
      outputs: [{ name: 'out', path: '/outputs' }],
    });
    expect(produced).toMatchObject({ status: 'completed', node: n3.peerId });
    // Signed by node 3 for node 1, and what the job record lists.
    const manifest = openManifest(produced.manifest!, { job: produced.id, node: n3.peerId, requester: n1.peerId });
    expect(produced.outputs).toEqual(manifest.outputs);
    expect(manifest.outputs[0]).toMatchObject({ name: 'out', size: 16 * MiB + 6 });
    const printed = (await stdout(n1, produced.id)).split(' ')[0];

    // The first fetch is killed (kill -9) once a few blocks are in; the second resumes.
    const before = blockFiles(n1);
    const dir = join(scratch, 'got');
    const first = spawn(process.execPath, [CLI, '--home', n1.home, 'jobs', 'get', produced.id, '--output-dir', dir], { env: { ...process.env, ...TEST_ENV }, stdio: 'ignore' });
    const exited = new Promise<number | null>((r) => first.once('exit', (code) => r(code)));
    await waitFor('the first fetch holds a few blocks', () => blockFiles(n1) - before >= 8, { timeoutMs: 30_000, intervalMs: 5 });
    first.kill('SIGKILL');
    expect(await exited, 'the first fetch was killed, not finished').toBe(null);
    // Node 1 stops its side of the fetch when the client goes; a block in flight may still land.
    let last = -1;
    const held = await waitFor('node 1 stopped fetching', async () => {
      const now = blockFiles(n1) - before;
      const settled = now === last;
      last = now;
      await new Promise((r) => setTimeout(r, 300));
      return settled ? now : undefined;
    }, { timeoutMs: 10_000, intervalMs: 1 });

    const second = await runCli(['--home', n1.home, 'jobs', 'get', produced.id, '--output-dir', dir]);
    expect(second.code, second.stderr).toBe(0);
    const fetched = Number(/\((\S+), \d+ bytes, (\d+) blocks fetched\)/.exec(second.stdout)?.[2]);
    const total = blockFiles(n1) - before;
    // Some blocks came the second time, but not those held already: it did not start over.
    expect(fetched).toBeGreaterThan(0);
    expect(held + fetched).toBe(total);
    expect(second.stdout).toContain(`out: ${join(dir, 'out')} (${manifest.outputs[0].cid}, ${16 * MiB + 6} bytes`);
    expect(sha(readFileSync(join(dir, 'out', 'a.bin')))).toBe(printed);
    expect(readFileSync(join(dir, 'out', 'sub', 'b.txt'), 'utf8')).toBe('hello\n');

    // --json prints the manifest; a third get fetches nothing.
    const again = await runCli(['--home', n1.home, '--json', 'jobs', 'get', produced.id, '--output-dir', dir, '--name', 'out']);
    expect(again.code, again.stderr).toBe(0);
    expect(JSON.parse(again.stdout)).toMatchObject({ job: produced.id, node: n3.peerId, requester: n1.peerId, signed: produced.manifest, written: { out: join(dir, 'out') } });
  });

  it('a job on node 2 reads the output as an input: the same bytes', async () => {
    const [n1, n2] = nodes;
    const consumer = await submit(n1, {
      name: 'consumer',
      command: 'sha256sum /in/a.bin | cut -d" " -f1; cat /in/sub/b.txt',
      placement: { node: n2.peerId },
      inputs: [{ source: `job:${produced.id}/out`, path: '/in' }],
    });
    expect(consumer, consumer.error ?? '').toMatchObject({ status: 'completed', node: n2.peerId });
    const printed = (await stdout(n1, produced.id)).split(' ')[0];
    expect(await stdout(n1, consumer.id)).toBe(`${printed}\nhello\n`);
  });

  it('dms run -i ./data:/inputs from node 1 runs on node 3 with the local files', async () => {
    const [n1, , n3] = nodes;
    const data = join(scratch, 'data');
    mkdirSync(join(data, 'deep'), { recursive: true });
    writeFileSync(join(data, 'deep', 'x.txt'), 'local file\n');
    const run = await runCli(['--home', n1.home, 'run', '--node', n3.peerId, '--memory', '64MiB', '-i', `${data}:/inputs`, TEST_IMAGE, 'cat', '/inputs/deep/x.txt'], {}, scratch);
    expect(run.code, run.stderr).toBe(0);
    expect(run.stdout).toBe('local file\n');
    expect(run.stderr).toMatch(/uploaded .*data as bafy/);
  });

  it('refuses to give node 2 the manifest of a job it did not ask for', async () => {
    const [, n2, n3] = nodes;
    // Node 2's own REST: it does not know the job at all.
    expect((await fetch(`${n2.url}/api/v1/jobs/${produced.id}/outputs`)).status).toBe(404);
    // Node 2 asking node 3 over the network, as node 1's remote executor does: refused.
    const client = new DmsClient({ url: n2.url, timeoutMs: 10_000 });
    await expect(client.invoke({ host: n3.peerId, inbox: 'outputs' }, '/dms/deployment/manifest', { job_id: produced.id })).rejects.toThrow(/the manifest of job .* is its requester's, and whoever it grants \/dms\/job\/read\/.*, only: no read right was presented/);
  });

  it('dms jobs grant on node 1 lets dms jobs get on node 2 write the output from node 3; without it, refused', async () => {
    const [n1, n2, n3] = nodes;
    const refused = await runCli(['--home', n2.home, 'jobs', 'get', produced.id, '--from', n3.peerId, '--output-dir', join(scratch, 'refused')]);
    expect(refused.code).not.toBe(0);
    expect(refused.stderr).toContain('no read right was presented');
    const granted = await runCli(['--home', n1.home, 'jobs', 'grant', produced.id.slice(0, 8), n2.did, '--expiry', '1h']);
    expect(granted.code, granted.stderr).toBe(0);
    expect(granted.stderr).toContain(`/dms/job/read/${produced.id} for ${n2.did}`);
    const got = await runCli(['--home', n2.home, 'jobs', 'get', produced.id, '--from', n3.peerId, '--grant', granted.stdout.trim(), '--output-dir', join(scratch, 'granted')]);
    expect(got.code, got.stderr).toBe(0);
    expect(sha(readFileSync(join(scratch, 'granted', 'out', 'a.bin')))).toBe(sha(readFileSync(join(scratch, 'got', 'out', 'a.bin'))));
    expect(readFileSync(join(scratch, 'granted', 'out', 'sub', 'b.txt'), 'utf8')).toBe('hello\n');

    // Revoked on node 1 the way any token is, the right reads nothing more: not from node 1, and
    // not from node 3, which ran the job and answered it until node 1 told it of the revocation.
    const revoked = await runCli(['--home', n1.home, 'cap', 'revoke', granted.stdout.trim()]);
    expect(revoked.code, revoked.stderr).toBe(0);
    for (const from of [n3, n1]) {
      const again = await runCli(['--home', n2.home, 'jobs', 'get', produced.id, '--from', from.peerId, '--grant', granted.stdout.trim(), '--output-dir', join(scratch, `revoked-${from.peerId}`)]);
      expect(again.code, `read from ${from === n3 ? 'node 3' : 'node 1'} after the revocation: ${again.stdout}`).not.toBe(0);
      expect(again.stderr).toContain(`revoked by ${n1.did}`);
    }
    expect(revoked.stderr).toContain(`job ${produced.id}'s read right revoked by the node too: its provider ${n3.peerId} acknowledged`);
  });
});
