/**
 * Job outputs on one node (in process, real Docker): uploads through POST /api/v1/blobs, a
 * Docker job's outputs collected, signed and read back through the REST routes, and the
 * hostile cases each refused with its reason.
 */
import { createHash, randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import * as tar from 'tar-stream';
import { CID } from 'multiformats/cid';
import { sha256 } from 'multiformats/hashes/sha2';
import { openManifest } from '../../behaviors/jobs/manifest.js';
import { dockerForTests, TEST_IMAGE } from '../helpers/docker.js';
import { startLocalNode, type LocalNode } from '../helpers/local-node.js';
import { removeHome } from '../helpers/node.js';
import { waitFor } from '../helpers/network.js';
import { tarFiles } from '../helpers/tar.js';

const { docker, problem } = await dockerForTests('job outputs test');

async function tarOf(entries: { name: string; body?: Buffer; type?: 'symlink' | 'directory'; linkname?: string }[]): Promise<Buffer> {
  const pack = tar.pack();
  for (const { body, ...h } of entries) {
    if (body) pack.entry({ ...h, size: body.length }, body);
    else pack.entry(h);
  }
  pack.finalize();
  const chunks: Buffer[] = [];
  for await (const c of pack as unknown as AsyncIterable<Buffer>) chunks.push(c);
  return Buffer.concat(chunks);
}

const sha = (b: Buffer) => createHash('sha256').update(b).digest('hex');

describe('uploads', () => {
  let node: LocalNode;
  beforeAll(async () => {
    node = await startLocalNode({ config: { blocks: { max_upload_bytes: 1024 * 1024 } } });
  });
  afterAll(async () => {
    await node.stop();
    removeHome(node.home);
  });
  const post = (body: Buffer, type: string) => fetch(`${node.url}/api/v1/blobs`, { method: 'POST', headers: { 'content-type': type }, body: new Uint8Array(body) });

  it('stores a tar as a directory and a file as itself, answering the CID', async () => {
    const dir = await post(await tarOf([{ name: 'a.txt', body: Buffer.from('a') }]), 'application/x-tar');
    expect(dir.status).toBe(201);
    expect(await dir.json()).toMatchObject({ cid: expect.stringMatching(/^bafy/), size: 1, kind: 'directory' });
    const file = await post(Buffer.from('just bytes'), 'application/octet-stream');
    expect(await file.json()).toMatchObject({ cid: expect.stringMatching(/^bafk/), size: 10, kind: 'file' });
  });

  it('refuses a tar climbing out, an absolute path, a symlink leaving its root, naming the entry', async () => {
    for (const [entries, error] of [
      [[{ name: '../x', body: Buffer.from('x') }], "tar entry '../x': paths with '..' are refused"],
      [[{ name: '/abs', body: Buffer.from('x') }], "tar entry '/abs': absolute paths are refused"],
      [[{ name: 'l', type: 'symlink', linkname: '/etc' }], "tar entry 'l': symlink to '/etc' leaves the archive's root"],
    ] as const) {
      const res = await post(await tarOf([...entries]), 'application/x-tar');
      expect(res.status).toBe(400);
      expect(((await res.json()) as { error: string }).error).toBe(error);
    }
  });

  it('refuses a tar holding a file and a directory of one name, naming the entry', async () => {
    for (const [entries, error] of [
      [[{ name: 'a', body: Buffer.from('1') }, { name: 'a/b', body: Buffer.from('2') }], "tar entry 'a/b' is inside 'a', which the archive has as a file"],
      [[{ name: 'a/b', body: Buffer.from('2') }, { name: 'a', body: Buffer.from('1') }], "tar entry 'a' is a file, but the archive has a directory 'a'"],
    ] as const) {
      const res = await post(await tarOf([...entries]), 'application/x-tar');
      expect(res.status).toBe(400);
      expect(((await res.json()) as { error: string }).error).toBe(error);
    }
  });

  it('refuses a path 2,000 components deep, naming it and the bound', async () => {
    // It overflowed the stack: 400 "Maximum call stack size exceeded", and V8 wrote the bundled source to stderr twice.
    const res = await post(await tarOf([{ name: `${'d/'.repeat(1999)}f`, body: Buffer.from('x') }]), 'application/x-tar');
    expect(res.status).toBe(400);
    expect(((await res.json()) as { error: string }).error).toBe(`tar entry '${'d/'.repeat(100)}…' has 2000 path components: at most 256 are stored`);
  });

  it('pins and unpins CIDs, refusing one of another codec', async () => {
    const up = (await (await post(Buffer.from('keep me'), 'application/octet-stream')).json()) as { cid: string };
    const pin = await fetch(`${node.url}/api/v1/pins`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ cid: up.cid }) });
    expect(pin.status).toBe(201);
    expect(await pin.json()).toEqual({ pins: [up.cid] });
    const cbor = CID.createV1(0x71, await sha256.digest(Buffer.from('x'))).toString();
    const bad = await fetch(`${node.url}/api/v1/pins`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ cid: cbor }) });
    expect(bad.status).toBe(400);
    expect((await fetch(`${node.url}/api/v1/pins/${up.cid}`, { method: 'DELETE' })).status).toBe(200);
    expect((await fetch(`${node.url}/api/v1/pins/${up.cid}`, { method: 'DELETE' })).status).toBe(404);
  });

  it('refuses content larger than blocks.max_upload_bytes, and bodies of other types', async () => {
    const big = await post(randomBytes(1024 * 1024 + 1), 'application/octet-stream');
    expect(big.status).toBe(413);
    expect(((await big.json()) as { error: string }).error).toMatch(/larger than the limit of 1 MiB/);
    // What this route takes, not what every other one does: JSON, or no type at all, is as wrong
    // here as any other type, and said so the same way.
    const wanted = 'Content-Type must be application/x-tar (a directory) or application/octet-stream (a file), got';
    for (const [type, shown] of [['text/plain', 'text/plain'], ['application/json', 'application/json']] as const) {
      const r = await post(Buffer.from('{}'), type);
      expect(r.status, type).toBe(415);
      expect(((await r.json()) as { error: string }).error).toBe(`${wanted} ${shown}`);
    }
    const untyped = await fetch(`${node.url}/api/v1/blobs`, { method: 'POST' });
    expect(untyped.status).toBe(415);
    expect(((await untyped.json()) as { error: string }).error).toBe(`${wanted} none`);
  });
});

describe.skipIf(problem !== null)('a Docker job with outputs', { timeout: 120_000 }, () => {
  let node: LocalNode;
  beforeAll(async () => {
    node = await startLocalNode();
  });
  afterAll(async () => {
    const left = await docker.listContainers({ all: true, filters: { label: [`dms.node=${node.peerId}`] } });
    await Promise.all(left.map((c) => docker.getContainer(c.Id).remove({ force: true }).catch(() => undefined)));
    await node.stop();
    removeHome(node.home);
  });

  const run = async (spec: object) => {
    const res = await fetch(`${node.url}/api/v1/jobs`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ image: TEST_IMAGE, resources: { cpu: 0.5, memory: '64MiB' }, ...spec }) });
    expect(res.status, await res.clone().text()).toBe(201);
    const { id } = (await res.json()) as { id: string };
    return waitFor(`job ${id} ended`, async () => {
      const j = (await (await fetch(`${node.url}/api/v1/jobs/${id}`)).json()) as { status: string; manifest: string | null; outputs: { name: string; cid?: string; error?: string }[]; inputs: { cid?: string }[] };
      return j.status === 'completed' || j.status === 'failed' ? { id, ...j } : undefined;
    }, { timeoutMs: 60_000 });
  };

  it('collects each output, signs the manifest with the node key, and serves the files', async () => {
    const job = await run({
      name: 'writes',
      command: 'mkdir -p /outputs/sub && head -c 1048577 /dev/urandom > /outputs/a.bin && echo hi > /outputs/sub/b.txt && echo one > /single.txt && echo done',
      outputs: [{ name: 'out', path: '/outputs' }, { name: 'one', path: '/single.txt' }, { name: 'gone', path: '/nowhere.txt' }, { name: 'empty', path: '/empty' }],
    });
    expect(job.status).toBe('completed');
    const manifest = openManifest(job.manifest!, { job: job.id, node: node.peerId });
    expect(manifest).toMatchObject({ requester: null, exit_code: 0, logs: { cid: expect.any(String), size: expect.any(Number) } });
    expect(job.outputs).toEqual(manifest.outputs);
    expect(manifest.outputs[0]).toMatchObject({ name: 'out', path: '/outputs', cid: expect.stringMatching(/^bafy/), size: 1048577 + 3 });
    expect(manifest.outputs[2]).toEqual({ name: 'gone', path: '/nowhere.txt', error: '/nowhere.txt does not exist in the container' });
    // A directory the job never wrote to was made for it before it started: an empty output, not a missing one.
    expect(manifest.outputs[3]).toMatchObject({ name: 'empty', path: '/empty', cid: expect.stringMatching(/^bafy/), size: 0 });

    const got = await fetch(`${node.url}/api/v1/jobs/${job.id}/outputs`);
    expect(await got.json()).toMatchObject({ job: job.id, node: node.peerId, signed: job.manifest });
    const out = await fetch(`${node.url}/api/v1/jobs/${job.id}/outputs/out`);
    expect(out.headers.get('content-type'), await out.clone().text()).toBe('application/x-tar');
    expect(out.headers.get('x-dms-blocks-fetched')).toBe('0');
    const files = await tarFiles(Buffer.from(await out.arrayBuffer()));
    expect([...files.keys()].sort()).toEqual(['a.bin', 'sub/b.txt']);
    expect(files.get('a.bin')!.length).toBe(1048577);
    expect(files.get('sub/b.txt')!.toString()).toBe('hi\n');
    const one = await fetch(`${node.url}/api/v1/jobs/${job.id}/outputs/one`);
    expect(await one.text()).toBe('one\n');
    const part = await fetch(`${node.url}/api/v1/jobs/${job.id}/outputs/one`, { headers: { range: 'bytes=1-2' } });
    expect(part.status).toBe(206);
    expect(part.headers.get('content-range')).toBe('bytes 1-2/4');
    expect(await part.text()).toBe('ne');
    // Byte for byte what the container wrote: its sha256, printed by the job, matches.
    expect(sha(files.get('sub/b.txt')!)).toBe(sha(Buffer.from('hi\n')));

    const missing = await fetch(`${node.url}/api/v1/jobs/${job.id}/outputs/nope`);
    expect(missing.status).toBe(404);
    expect(((await missing.json()) as { error: string }).error).toBe(`job ${job.id} has no output named nope (it has: out, one, gone, empty)`);
    const notCollected = await fetch(`${node.url}/api/v1/jobs/${job.id}/outputs/gone`);
    expect(notCollected.status).toBe(409);
  });

  it('answers a Range past the end 416 with the size, and a Range it does not serve with the whole file', async () => {
    const job = await run({ name: 'two', command: 'printf hi > /two.txt', outputs: [{ name: 'two', path: '/two.txt' }] });
    expect(job.status).toBe('completed');
    const get = (range: string) => fetch(`${node.url}/api/v1/jobs/${job.id}/outputs/two`, { headers: { range } });
    // `bytes=2-` is what `curl -C -` asks once it holds the whole file: it reads 416 as done.
    for (const range of ['bytes=2-', 'bytes=9-12', 'bytes=-0']) {
      const res = await get(range);
      expect(res.status, range).toBe(416);
      expect(res.headers.get('content-range'), range).toBe('bytes */2');
      expect(((await res.json()) as { error: string }).error).toBe(`Range: ${range} is outside the file's 2 bytes`);
    }
    for (const [range, from, to, body] of [['bytes=1-', 1, 1, 'i'], ['bytes=-5', 0, 1, 'hi'], ['bytes=0-99', 0, 1, 'hi'], ['Bytes=0-0', 0, 0, 'h']] as const) {
      const res = await get(range);
      expect(res.status, range).toBe(206);
      expect(res.headers.get('content-range'), range).toBe(`bytes ${from}-${to}/2`);
      expect(await res.text()).toBe(body);
    }
    // Several ranges, another unit, or a range that is not one: the whole file, as RFC 9110 lets a server answer.
    for (const range of ['bytes=0-0,1-1', 'items=0-1', 'bytes=1-0', 'bytes=x-1', 'bytes=-', 'bytes 0-1']) {
      const res = await get(range);
      expect(res.status, range).toBe(200);
      expect(res.headers.get('content-range'), range).toBeNull();
      expect(res.headers.get('content-length'), range).toBe('2');
      expect(await res.text()).toBe('hi');
    }
  });

  it('refuses an output that is a symlink to /etc, or holds one leaving it', async () => {
    const job = await run({
      name: 'links',
      // A name with an extension names a file, so no directory is made there before the job runs.
      command: 'ln -s /etc /escape.lnk && mkdir -p /o && ln -s /etc/passwd /o/passwd && echo ok',
      outputs: [{ name: 'escape', path: '/escape.lnk' }, { name: 'inside', path: '/o' }],
    });
    expect(job.outputs).toEqual([
      { name: 'escape', path: '/escape.lnk', error: "/escape.lnk: tar entry 'escape.lnk': symlink to '/etc' leaves the archive's root" },
      { name: 'inside', path: '/o', error: "/o: tar entry 'o/passwd': symlink to '/etc/passwd' leaves the archive's root" },
    ]);
  });

  const logsOf = async (id: string) =>
    ((await (await fetch(`${node.url}/api/v1/jobs/${id}/logs`)).json()) as { chunks: { stream: string; data: string }[] }).chunks
      .filter((c) => c.stream === 'stdout')
      .map((c) => c.data)
      .join('');

  it('mounts inputs read-only: an upload by CID, another job\'s output by job:<id>/<name>', async () => {
    const up = (await (
      await fetch(`${node.url}/api/v1/blobs`, { method: 'POST', headers: { 'content-type': 'application/x-tar' }, body: new Uint8Array(await tarOf([{ name: 'd/x.txt', body: Buffer.from('from upload\n') }])) })
    ).json()) as { cid: string };
    const producer = await run({ name: 'producer', command: 'mkdir -p /outputs && echo produced > /outputs/p.txt', outputs: [{ name: 'out', path: '/outputs' }] });
    const consumer = await run({
      name: 'consumer',
      command: 'cat /in/d/x.txt /prev/p.txt; echo nope > /in/d/x.txt || echo read-only',
      inputs: [{ source: up.cid, path: '/in' }, { source: `job:${producer.id}/out`, path: '/prev' }],
    });
    expect(consumer.status).toBe('completed');
    expect(await logsOf(consumer.id)).toBe('from upload\nproduced\nread-only\n');
    // Each fetch is a step of its own in the job's history, not one of an image pull.
    const { events } = (await (await fetch(`${node.url}/api/v1/jobs/${consumer.id}/events`)).json()) as { events: { reason: string }[] };
    const resolved = consumer.inputs[1].cid;
    expect(events.map((e) => e.reason)).toEqual(expect.arrayContaining([`fetching input ${up.cid}`, `fetching input job:${producer.id}/out (${resolved})`]));
    expect(events.filter((e) => e.reason.includes('fetching input')).every((e) => !e.reason.startsWith('pulling image'))).toBe(true);
  });

  it('fails a job whose input no node has, naming it; refuses a job: input with no such output', async () => {
    const absent = CID.createV1(0x55, await sha256.digest(randomBytes(32))).toString();
    const job = await run({ name: 'missing', command: 'true', inputs: [{ source: absent, path: '/in' }] });
    expect(job.status).toBe('failed');
    expect((job as unknown as { error: string }).error).toContain(`input ${absent} is missing`);
    const producer = await run({ name: 'p2', command: 'mkdir /outputs', outputs: [{ name: 'out', path: '/outputs' }] });
    const res = await fetch(`${node.url}/api/v1/jobs`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ name: 'x', image: TEST_IMAGE, inputs: [{ source: `job:${producer.id}/other`, path: '/in' }] }) });
    expect(res.status).toBe(400);
    expect(((await res.json()) as { error: string }).error).toBe(`input job:${producer.id}/other: job ${producer.id} has no collected output named other`);
  });

  it('refuses an input naming a CID of another codec or hash, or no CID at all', async () => {
    const cbor = CID.createV1(0x71, await sha256.digest(Buffer.from('x'))).toString();
    for (const [source, error] of [
      [cbor, `${cbor}: codec 0x71: only raw and dag-pb (UnixFS) are stored`],
      ['QmYwAPJzv5CZsnA625s3Xf2nemtYgPpHdWEz79ojWnPbdG', 'CID version 0: only CIDv1 is stored'],
      ['job:nope', "'job:nope' is not job:<job id>/<output name>"],
    ]) {
      const res = await fetch(`${node.url}/api/v1/jobs`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ name: 'bad', image: TEST_IMAGE, inputs: [{ source, path: '/in' }] }) });
      expect(res.status).toBe(400);
      expect(((await res.json()) as { error: string }).error).toContain(error);
    }
  });

  it('refuses at submit a mount point Docker would refuse at start: with a colon, or twice', async () => {
    // Found on a running node: both were accepted (201) and failed at the container's start, the
    // first naming the node's own input directory in its error.
    const cid = 'bafkreigh2akiscaildcqabsyg3dfr6chu3fgpregiymsck7e7aqa4s52zy';
    for (const [inputs, error] of [
      [[{ source: cid, path: '/in:rw' }], "inputs.0.path: a mount point without ':'"],
      [[{ source: cid, path: '/in' }, { source: cid, path: '/in/' }], 'inputs: each mount point (path) at most once'],
    ] as const) {
      const res = await fetch(`${node.url}/api/v1/jobs`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ name: 'bad', image: TEST_IMAGE, inputs }) });
      expect(res.status).toBe(400);
      expect(((await res.json()) as { error: string }).error).toContain(error);
    }
  });

  it('a volume written by one job is read by the next; its snapshot is a CID', async () => {
    const made = await fetch(`${node.url}/api/v1/volumes`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ name: 'data', size: '1GiB' }) });
    expect(made.status, JSON.stringify(made.json)).toBe(201);
    const writer = await run({ name: 'writer', command: 'echo kept > /data/x.txt', inputs: [{ source: 'volume:data', path: '/data', writable: true }] });
    expect(writer.status).toBe('completed');
    const reader = await run({ name: 'reader', command: 'cat /data/x.txt; echo no > /data/y.txt || echo read-only', inputs: [{ source: 'volume:data', path: '/data' }] });
    expect(await logsOf(reader.id)).toBe('kept\nread-only\n');
    const snap = await fetch(`${node.url}/api/v1/volumes/data/snapshot`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{}' });
    const snapshot = (await snap.json()) as { cid: string };
    expect(snapshot).toMatchObject({ cid: expect.stringMatching(/^bafy/), size: 5, kind: 'directory' });

    const post = (spec: object) => fetch(`${node.url}/api/v1/jobs`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ name: 'v', image: TEST_IMAGE, ...spec }) });
    const elsewhere = await post({ inputs: [{ source: 'volume:data', path: '/d' }], placement: { labels: { zone: 'x' } } });
    expect(((await elsewhere.json()) as { error: string }).error).toMatch(/a job mounting volume data runs on the node that has it/);
    const missing = await post({ inputs: [{ source: 'volume:nope', path: '/d' }] });
    expect(((await missing.json()) as { error: string }).error).toBe('input volume:nope: volume nope does not exist on this node');
    const writableCid = await post({ inputs: [{ source: snapshot.cid, path: '/d', writable: true }] });
    expect(writableCid.status).toBe(400);
    expect((await fetch(`${node.url}/api/v1/volumes/data`, { method: 'DELETE' })).status).toBe(200);
  });

  it('refuses bad output specs: a relative path, .., a duplicate name', async () => {
    for (const outputs of [[{ name: 'a', path: 'rel' }], [{ name: 'a', path: '/x/../etc' }], [{ name: 'a', path: '/a' }, { name: 'a', path: '/b' }], [{ name: '../a', path: '/a' }]]) {
      const res = await fetch(`${node.url}/api/v1/jobs`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ name: 'bad', image: TEST_IMAGE, outputs }) });
      expect(res.status).toBe(400);
    }
  });
});
