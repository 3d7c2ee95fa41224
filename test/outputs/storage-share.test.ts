/**
 * Uploads and volumes count against the node's storage share (README "Job outputs",
 * "Onboarding"): the resource manager holds an upload's bytes while it is written and counts the
 * blocks it leaves, a volume holds its size from its creation; what does not fit what is free is
 * refused naming the sizes, and the resource view says what blocks and volumes hold. In process:
 * the node's own REST, resource manager and block store.
 */
import { randomBytes } from 'node:crypto';
import { request } from 'node:http';
import { readdirSync } from 'node:fs';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Usage } from '../../behaviors/jobs/resources.js';
import type { LocalNode } from '../helpers/local-node.js';
import { removeHome } from '../helpers/node.js';
import { parseCid } from '../../runtime/blocks/cid.js';
import { MiB, nullJob, startLocalJobNode, until } from '../jobs/helpers.js';

const json = (method: string, body: unknown) => ({ method, headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });

describe('the storage share', () => {
  let node: LocalNode;
  beforeAll(async () => {
    node = await startLocalJobNode();
    const onboard = await fetch(`${node.url}/api/v1/device/config`, json('PUT', { onboarded: { cpu: 1, memory: '256MiB', storage: '2MiB' } }));
    expect(onboard.status, await onboard.clone().text()).toBe(200);
  });
  afterAll(async () => {
    await node.stop();
    removeHome(node.home);
  });

  const usage = async () => (await (await fetch(`${node.url}/api/v1/resources/usage`)).json()) as Usage;
  const upload = (body: Buffer) => fetch(`${node.url}/api/v1/blobs`, { method: 'POST', headers: { 'content-type': 'application/octet-stream' }, body: new Uint8Array(body) });
  const errorOf = async (res: Response) => ((await res.json()) as { error: string }).error;

  it('refuses a file larger than the share, naming both sizes, before reading it', async () => {
    const res = await upload(randomBytes(3 * MiB));
    expect(res.status).toBe(413);
    expect(await errorOf(res)).toBe('upload of 3 MiB is larger than the 2 MiB of storage free here (2 MiB onboarded; blocks hold 0 B, volumes 0 B)');
  });

  it('stops an upload of no declared length once it passes what is free', async () => {
    const body = Readable.toWeb(Readable.from((function* () {
      for (let i = 0; i < 12; i++) yield randomBytes(256 * 1024);
    })())) as ReadableStream;
    const res = await fetch(`${node.url}/api/v1/blobs`, { method: 'POST', headers: { 'content-type': 'application/octet-stream' }, body, duplex: 'half' } as RequestInit);
    expect(res.status).toBe(413);
    expect(await errorOf(res)).toMatch(/^upload is larger than the 2 MiB of storage free here \(2 MiB in the share; blocks.max_upload_bytes is /);
    // The claim is given back: nothing is left held for an upload.
    expect((await usage()).stored.uploads).toBe(0);
  });

  it('holds a volume\'s size and the blocks uploads leave, refusing what no longer fits, and shows both', async () => {
    const made = await fetch(`${node.url}/api/v1/volumes`, json('POST', { name: 'a', size: '1MiB' }));
    expect(made.status, await made.clone().text()).toBe(201);
    let u = await usage();
    expect(u.stored).toMatchObject({ volumes: MiB, uploads: 0 });
    const blocksBefore = u.stored.blocks;
    expect(u.free.storage.size).toBe(2 * MiB - MiB - blocksBefore);

    const tooBig = await upload(randomBytes(MiB + MiB / 2));
    expect(tooBig.status).toBe(413);
    expect(await errorOf(tooBig)).toMatch(/^upload of 1\.5 MiB is larger than the [\d.]+ (KiB|MiB) of storage free here \(2 MiB onboarded; blocks hold [\d.]+ (B|KiB), volumes 1 MiB\)$/);

    const fits = await upload(randomBytes(MiB / 2));
    expect(fits.status, await fits.clone().text()).toBe(201);
    u = await usage();
    expect(u.stored.blocks).toBeGreaterThanOrEqual(blocksBefore + MiB / 2);
    expect(u.allocated.storage.size).toBe(u.stored.blocks + MiB);

    // A volume of nothing would hold none of the share, whatever its jobs write.
    for (const size of [0, '0B']) {
      const empty = await fetch(`${node.url}/api/v1/volumes`, json('POST', { name: 'empty', size }));
      expect(empty.status).toBe(400);
      expect(await errorOf(empty)).toContain('size: a volume holds at least 1 byte of the storage share: give its size, e.g. 1GiB');
    }

    const second = await fetch(`${node.url}/api/v1/volumes`, json('POST', { name: 'b', size: '1MiB' }));
    expect(second.status).toBe(409);
    expect(await errorOf(second)).toMatch(/^volume b: not enough storage: 1 MiB asked, [\d.]+ KiB free \(2 MiB onboarded; blocks hold [\d.]+ KiB, volumes 1 MiB\)$/);

    expect((await fetch(`${node.url}/api/v1/volumes/a`, { method: 'DELETE' })).status).toBe(200);
    expect((await usage()).stored.volumes).toBe(0);
    const now = await fetch(`${node.url}/api/v1/volumes`, json('POST', { name: 'b', size: '1MiB' }));
    expect(now.status, await now.clone().text()).toBe(201);
  });

  it('still counts the volumes and blocks after a restart', async () => {
    const before = (await usage()).stored;
    await node.stop();
    const again = await startLocalJobNode({ home: node.home });
    node = again;
    expect((await usage()).stored).toEqual(before);
  });

  it('tells an operator who onboarded no disk how to offer some when a volume is asked for', async () => {
    const onboard = await fetch(`${node.url}/api/v1/device/config`, json('PUT', { onboarded: { cpu: 1, memory: '256MiB' } }));
    expect(onboard.status, await onboard.clone().text()).toBe(200);
    const res = await fetch(`${node.url}/api/v1/volumes`, json('POST', { name: 'c', size: '1MiB' }));
    expect(res.status).toBe(409);
    expect(await errorOf(res)).toBe('volume c: not enough storage: 1 MiB asked, this node offers no disk: its operator onboards some with `dms onboard --disk <size>`');
  });

  it('answers a client that asks before sending (Expect: 100-continue) on the declared size, and asks for the body only when it fits', async () => {
    // What came first: the node's go-ahead, or its answer (with its status).
    const ask = (size: number) =>
      new Promise<{ first: string; status: number; text: string }>((resolve, reject) => {
        const req = request(`${node.url}/api/v1/blobs`, { method: 'POST', headers: { 'content-type': 'application/octet-stream', 'content-length': String(size), expect: '100-continue' } });
        let first: string | undefined;
        req.once('continue', () => {
          first ??= 'continue';
          req.end(randomBytes(size));
        });
        req.once('response', (res) => {
          first ??= 'response';
          let text = '';
          res.setEncoding('utf8').on('data', (d: string) => (text += d));
          res.once('end', () => resolve({ first: first!, status: res.statusCode!, text }));
        });
        req.once('error', reject);
        req.flushHeaders();
      });
    const onboard = await fetch(`${node.url}/api/v1/device/config`, json('PUT', { onboarded: { cpu: 1, memory: '256MiB', storage: '16MiB' } }));
    expect(onboard.status, await onboard.clone().text()).toBe(200);
    const refused = await ask(64 * MiB);
    expect(refused).toMatchObject({ first: 'response', status: 413 });
    expect(JSON.parse(refused.text).error).toMatch(/^upload of 64 MiB is larger than the .+ of storage free here \(16 MiB onboarded/);
    const taken = await ask(1024);
    expect(taken, taken.text).toMatchObject({ first: 'continue', status: 201 });
  });
});

// The importer writes a file's blocks ten at a time (2.5 MiB): a share large enough to see them.
describe('an upload that did not complete', () => {
  let node: LocalNode;
  beforeAll(async () => {
    node = await startLocalJobNode();
    const onboard = await fetch(`${node.url}/api/v1/device/config`, json('PUT', { onboarded: { cpu: 1, memory: '256MiB', storage: '8MiB' } }));
    expect(onboard.status, await onboard.clone().text()).toBe(200);
  });
  afterAll(async () => {
    await node.stop();
    removeHome(node.home);
  });
  const usage = async () => (await (await fetch(`${node.url}/api/v1/resources/usage`)).json()) as Usage;

  it('keeps no block of an upload that did not complete: dropped by its client, or cut at what is free', async () => {
    const files = () => readdirSync(join(node.home, 'data', 'blocks'), { recursive: true }).filter((f) => String(f).endsWith('.data')).length;
    const before = { bytes: (await usage()).stored.blocks, files: files() };
    const chunks = (n: number) => Readable.toWeb(Readable.from((function* () {
      for (let i = 0; i < n; i++) yield randomBytes(256 * 1024);
    })())) as ReadableStream;
    // A client that goes away half-way: 6 MiB sent, then the connection dropped.
    const drop = new AbortController();
    let sent = 0;
    const body = new ReadableStream({
      pull(c) {
        if (sent++ < 24) c.enqueue(randomBytes(256 * 1024));
        else setTimeout(() => drop.abort(), 300);
      },
    });
    await expect(fetch(`${node.url}/api/v1/blobs`, { method: 'POST', headers: { 'content-type': 'application/octet-stream' }, body, duplex: 'half', signal: drop.signal } as RequestInit)).rejects.toThrow();
    await until('the dropped upload\'s blocks are gone', async () => (await usage()).stored.blocks === before.bytes && files() === before.files, 10_000).catch(() => undefined);
    expect({ bytes: (await usage()).stored.blocks, files: files() }).toEqual(before);

    // One cut at what is free (413).
    const cut = await fetch(`${node.url}/api/v1/blobs`, { method: 'POST', headers: { 'content-type': 'application/octet-stream' }, body: chunks(40), duplex: 'half' } as RequestInit);
    expect(cut.status).toBe(413);
    expect({ bytes: (await usage()).stored.blocks, files: files() }).toEqual(before);
  });
});

// Retention (blocks.max_blocks_bytes) keeps what pins and recent manifests name, and what a job
// not yet ended mounts: its inputs are fetched only when it starts.
describe('retention and the inputs of a job that has not started', () => {
  let node: LocalNode;
  beforeAll(async () => {
    const { startLocalNode } = await import('../helpers/local-node.js');
    node = await startLocalNode({ config: { network: { enabled: false }, general: { log_level: 'warn' }, jobs: { stop_grace_s: 1 }, blocks: { max_blocks_bytes: 1 } } });
  });
  afterAll(async () => {
    await node.stop();
    removeHome(node.home);
  });

  it('keeps the blocks of an input a pending job names, and lets them go once it ended', async () => {
    const put = await fetch(`${node.url}/api/v1/blobs`, { method: 'POST', headers: { 'content-type': 'application/octet-stream' }, body: new Uint8Array(randomBytes(MiB)) });
    expect(put.status).toBe(201);
    const { cid } = (await put.json()) as { cid: string };
    // Pending: a share of one core, all of it allocated.
    expect((await fetch(`${node.url}/api/v1/device/config`, json('PUT', { onboarded: { cpu: 1, memory: '256MiB', storage: '64MiB' } }))).status).toBe(200);
    const hog = await fetch(`${node.url}/api/v1/allocations`, json('POST', { resources: { cpu: { cores: 1 }, memory: { size: 0 } } }));
    expect(hog.status, await hog.clone().text()).toBe(201);
    const job = await fetch(`${node.url}/api/v1/jobs`, json('POST', { ...nullJob({ name: 'waits' }), inputs: [{ source: cid, path: '/in' }] }));
    expect(job.status, await job.clone().text()).toBe(201);
    const { id } = (await job.json()) as { id: string };
    await until('the job waits for resources', async () => ((await (await fetch(`${node.url}/api/v1/jobs/${id}`)).json()) as { pending_reason: string | null }).pending_reason?.startsWith('waiting for resources'));

    await node.node.blocks.collect();
    expect(await node.node.blocks.store.has(parseCid(cid))).toBe(true);

    expect((await fetch(`${node.url}/api/v1/jobs/${id}`, { method: 'DELETE' })).status).toBe(200);
    await node.node.blocks.collect();
    expect(await node.node.blocks.store.has(parseCid(cid))).toBe(false);
  });
});
