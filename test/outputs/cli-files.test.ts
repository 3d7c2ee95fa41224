import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import * as tar from 'tar-stream';
import { cidOfPath, upload, writeOutput } from '../../cli/files.js';
import { RestClient } from '../../client/rest.js';

const dirs: string[] = [];
afterAll(() => dirs.forEach((d) => rmSync(d, { recursive: true, force: true })));
const tmp = () => {
  const d = mkdtempSync(join(tmpdir(), 'dms-cli-files-'));
  dirs.push(d);
  return d;
};

async function tarOf(entries: { name: string; body: string }[]): Promise<Buffer> {
  const pack = tar.pack();
  for (const e of entries) pack.entry({ name: e.name, size: Buffer.byteLength(e.body) }, e.body);
  pack.finalize();
  const chunks: Buffer[] = [];
  for await (const c of pack as unknown as AsyncIterable<Buffer>) chunks.push(c);
  return Buffer.concat(chunks);
}
const tarResponse = async (entries: { name: string; body: string }[]) =>
  new Response(new Uint8Array(await tarOf(entries)), { headers: { 'content-type': 'application/x-tar' } });

describe('dms jobs get writing an output', () => {
  const entries = [
    { name: 'a.txt', body: 'a\n' },
    { name: 'sub/b.txt', body: 'b\n' },
  ];

  it('keeps the files only when they make the CID the manifest signed', async () => {
    // The CID the same files make, as the node would have imported them.
    const dir = tmp();
    const src = join(dir, 'src');
    mkdirSync(join(src, 'sub'), { recursive: true });
    writeFileSync(join(src, 'a.txt'), 'a\n');
    writeFileSync(join(src, 'sub', 'b.txt'), 'b\n');
    const cid = await cidOfPath(src);

    const dest = join(dir, 'out');
    await writeOutput(await tarResponse(entries), dest, cid);
    expect(readFileSync(join(dest, 'sub', 'b.txt'), 'utf8')).toBe('b\n');

    // A node that sends other bytes than the manifest names: nothing is kept.
    const other = join(dir, 'other');
    await expect(writeOutput(await tarResponse([{ name: 'a.txt', body: 'tampered\n' }]), other, cid)).rejects.toThrow(`not ${cid} as the signed manifest says: nothing was kept`);
    expect(existsSync(other)).toBe(false);
    expect(existsSync(`${other}.partial`)).toBe(false);
  });

  it('refuses a tar from the node naming a path outside the output', async () => {
    const dir = tmp();
    await expect(writeOutput(await tarResponse([{ name: '../escape.txt', body: 'x' }]), join(dir, 'out'), 'x')).rejects.toThrow(/paths with '\.\.' are refused/);
    expect(existsSync(join(dir, 'escape.txt'))).toBe(false);
  });
});

describe('dms put of a directory the CLI refuses part-way', () => {
  it('names the entry it refused, not the node as unreachable', async () => {
    // A node that reads the whole body before it answers: the body breaks off first.
    const node = createServer((req, res) => {
      req.resume();
      req.on('end', () => res.writeHead(201, { 'content-type': 'application/json' }).end('{"cid":"x","size":1,"kind":"directory"}'));
    });
    await new Promise<void>((r) => node.listen(0, '127.0.0.1', r));
    try {
      const dir = tmp();
      writeFileSync(join(dir, 'a.txt'), 'a\n');
      symlinkSync('/etc/passwd', join(dir, 'link'));
      const rest = new RestClient({ url: `http://127.0.0.1:${(node.address() as AddressInfo).port}` });
      const failed = await upload(rest, dir).then(() => null, (e: unknown) => e as Error);
      expect(failed?.message).toBe(`${join(dir, 'link')}: only regular files and directories are uploaded (links are not)`);
    } finally {
      node.close();
    }
  });
});

describe('dms put of a file whose size is known only by reading it (/proc, /sys)', () => {
  /** A node that keeps what it was sent and answers as a node would. */
  async function recordingNode() {
    const got: { body: Buffer; length: string | undefined }[] = [];
    const node = createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => {
        got.push({ body: Buffer.concat(chunks), length: req.headers['content-length'] });
        res.writeHead(201, { 'content-type': 'application/json' }).end('{"cid":"x","size":1,"kind":"file"}');
      });
    });
    await new Promise<void>((r) => node.listen(0, '127.0.0.1', r));
    return { got, rest: new RestClient({ url: `http://127.0.0.1:${(node.address() as AddressInfo).port}` }), close: () => node.close() };
  }

  it('sends what the file holds, not the nothing its size claims', async () => {
    const node = await recordingNode();
    try {
      await upload(node.rest, '/proc/version');
      expect(node.got[0]!.body.toString()).toBe(readFileSync('/proc/version', 'utf8'));
    } finally {
      node.close();
    }
  });

  it('puts such a file in a directory\'s tar with what it holds', async () => {
    const node = await recordingNode();
    try {
      await upload(node.rest, '/proc/sys/kernel/random');
      const entries = new Map<string, string>();
      const extract = tar.extract();
      extract.on('entry', (header, stream, next) => {
        const chunks: Buffer[] = [];
        stream.on('data', (c: unknown) => chunks.push(c as Buffer));
        stream.on('end', () => {
          entries.set(header.name, Buffer.concat(chunks).toString());
          next();
        });
      });
      await new Promise<void>((resolve, reject) => {
        extract.on('finish', resolve);
        extract.on('error', reject);
        extract.end(node.got[0]!.body);
      });
      expect(entries.get('poolsize')).toBe(readFileSync('/proc/sys/kernel/random/poolsize', 'utf8'));
      expect(entries.get('poolsize')).not.toBe('');
    } finally {
      node.close();
    }
  });
});
