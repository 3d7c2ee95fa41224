/**
 * A job's inputs are fetched and written out by the node that runs it, from a DAG its
 * requester names: the requester is a stranger to a provider, and a DAG is cheap to make
 * large. A few blocks whose links repeat one leaf make a file of any size (a zip bomb made of
 * links), a directory naming one empty file thousands of times makes as many files, and a DAG
 * of distinct blocks fills a disk as surely. Both are bounded by
 * `blocks.max_input_bytes`: the job fails naming it, quickly, with little written. In process
 * (the node's own Docker executor writes the inputs): the DAG's blocks are put in the node's
 * store beforehand, as a fetch from the requester would have left them.
 */
import { randomBytes } from 'node:crypto';
import { readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { emptyFile, fileOf256GiB, holdBlocks, repeatingDir } from '../helpers/dag.js';
import { dockerForTests, TEST_IMAGE } from '../helpers/docker.js';
import { type LocalNode, startLocalNode } from '../helpers/local-node.js';
import { waitFor } from '../helpers/network.js';

const { problem } = await dockerForTests('bounded inputs');
const MiB = 1024 * 1024;

/** Bytes of every file under `dir` (none when it is not there). */
function bytesUnder(dir: string): number {
  let n = 0;
  try {
    for (const f of readdirSync(dir, { recursive: true })) {
      const s = statSync(join(dir, String(f)));
      if (s.isFile()) n += s.size;
    }
  } catch {
    // Not there: nothing written, or already removed.
  }
  return n;
}

describe.skipIf(problem !== null)("a job's inputs, bounded by blocks.max_input_bytes", { timeout: 60_000 }, () => {
  let node: LocalNode;
  const post = (path: string, body: unknown) => fetch(`${node.url}${path}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });

  beforeAll(async () => {
    node = await startLocalNode({ config: { blocks: { max_input_bytes: MiB } } });
  }, 30_000);
  afterAll(async () => {
    await node?.stop();
  });

  async function failsNamingTheBound(source: string): Promise<void> {
    const res = await post('/api/v1/jobs', { name: 'bomb', image: TEST_IMAGE, command: 'true', resources: { cpu: 0.1, memory: '32MiB' }, inputs: [{ source, path: '/in' }] });
    expect(res.status, await res.clone().text()).toBe(201);
    const { id } = (await res.json()) as { id: string };
    const job = await waitFor(`job ${id} to end`, async () => {
      const j = (await (await fetch(`${node.url}/api/v1/jobs/${id}`)).json()) as { status: string; error: string | null };
      return j.status === 'completed' || j.status === 'failed' ? j : undefined;
    }, { timeoutMs: 20_000 });
    expect(job).toMatchObject({ status: 'failed', error: expect.stringContaining('more than 1 MiB (blocks.max_input_bytes)') });
    expect(job.error).toContain(source);
    // What was written before the bound was met is gone with the job's run.
    expect(bytesUnder(join(node.home, 'data', 'inputs', id))).toBe(0);
  }

  it('fails a job whose input repeats one leaf into a file of 256 GiB, without writing it or walking every link', async () => {
    const { root, blocks } = fileOf256GiB();
    await holdBlocks(node.home, blocks);
    await failsNamingTheBound(root.toString());
  });

  it('fails a job whose input is a directory naming one empty file thousands of times', async () => {
    const file = emptyFile();
    const dir = repeatingDir(file[0], 5000, 'f');
    await holdBlocks(node.home, [file, dir]);
    await failsNamingTheBound(dir[0].toString());
  });

  it('fails a job whose input is distinct content larger than the bound', async () => {
    const up = await fetch(`${node.url}/api/v1/blobs`, { method: 'POST', headers: { 'content-type': 'application/octet-stream' }, body: new Uint8Array(randomBytes(2 * MiB)) });
    expect(up.status).toBe(201);
    await failsNamingTheBound(((await up.json()) as { cid: string }).cid);
  });
});
