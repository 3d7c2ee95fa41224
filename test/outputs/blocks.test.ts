import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { randomBytes } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import * as tar from 'tar-stream';
import { CID } from 'multiformats/cid';
import { sha256, sha512 } from 'multiformats/hashes/sha2';
import { parseCid } from '../../runtime/blocks/cid.js';
import * as dagPb from '@ipld/dag-pb';
import { UnixFS } from 'ipfs-unixfs';
import * as raw from 'multiformats/codecs/raw';
import { exportTar, importFile, importPath, importTar, MAX_PATH_DEPTH } from '../../runtime/blocks/unixfs.js';
import { block } from '../helpers/dag.js';
import { tarEntries } from '../helpers/tar.js';
import { tempStores } from '../helpers/temp-stores.js';

const temp = tempStores('dms-blocks-');
const tmp = temp.folder;

type Entry = { name: string; type?: 'file' | 'directory' | 'symlink' | 'link' | 'fifo'; body?: Buffer; linkname?: string };
/** A tar made here entry by entry, hostile names included. */
async function makeTar(entries: Entry[]): Promise<Buffer> {
  const pack = tar.pack();
  for (const e of entries) {
    const { body, ...header } = e;
    if (body) pack.entry({ ...header, size: body.length }, body);
    else pack.entry(header);
  }
  pack.finalize();
  const chunks: Buffer[] = [];
  for await (const c of pack as unknown as AsyncIterable<Buffer>) chunks.push(c);
  return Buffer.concat(chunks);
}

/** Writes `bytes` over the start of the USTAR name of the header at `offset` of `tar`, and sets its checksum again. */
function rawName(tar: Buffer, offset: number, bytes: number[]): void {
  tar.set(bytes, offset);
  tar.fill(0x20, offset + 148, offset + 156);
  let sum = 0;
  for (let i = offset; i < offset + 512; i++) sum += tar[i];
  tar.write(`${sum.toString(8).padStart(6, '0')}\0 `, offset + 148, 'latin1');
}

describe('block store and UnixFS', async () => {
  const store = await temp.store();
  const big = randomBytes(3 * 1024 * 1024 + 17);

  it('imports a tar as a CIDv1 sha2-256 raw-leaves directory and exports the same files', async () => {
    const archive = await makeTar([
      { name: 'a.bin', body: big },
      { name: 'sub', type: 'directory' },
      { name: 'sub/b.txt', body: Buffer.from('hello\n') },
    ]);
    const got = await importTar(Readable.from([archive]), store.fs, { maxBytes: 10 * 1024 * 1024 });
    expect(got.kind).toBe('directory');
    expect(got.size).toBe(big.length + 6);
    expect(got.cid.version).toBe(1);
    expect(got.cid.multihash.code).toBe(sha256.code);
    const files = await tarEntries(exportTar(got.cid, store.fs, 'out'));
    expect((files.get('a.bin') as Buffer).equals(big)).toBe(true);
    expect(files.get('sub')).toBe('dir');
    expect(files.get('sub/b.txt')!.toString()).toBe('hello\n');

    // The same files on disk, in whatever order, give the same CID: what `dms jobs get` checks.
    const dir = tmp();
    mkdirSync(join(dir, 'sub'));
    writeFileSync(join(dir, 'sub', 'b.txt'), 'hello\n');
    writeFileSync(join(dir, 'a.bin'), big);
    const again = await importPath(dir, store.fs, { maxBytes: 10 * 1024 * 1024 });
    expect(again.cid.toString()).toBe(got.cid.toString());
  });

  it('imports one file, and a docker-style archive of one file is that file', async () => {
    const file = await importFile(Readable.from([big]), store.fs, { maxBytes: big.length });
    const archived = await importTar(Readable.from([await makeTar([{ name: 'x.bin', body: big }])]), store.fs, { maxBytes: big.length }, 1);
    expect(archived).toMatchObject({ kind: 'file', size: big.length });
    expect(archived.cid.toString()).toBe(file.cid.toString());
    // Leaves are raw blocks: the CID of each is the sha2-256 of its bytes.
    const onDisk = join(tmp(), 'f');
    writeFileSync(onDisk, big);
    expect((await importPath(onDisk, store.fs, { maxBytes: big.length })).cid.toString()).toBe(file.cid.toString());
  });

  it('strips the archived directory docker puts first', async () => {
    const archive = await makeTar([
      { name: 'outputs', type: 'directory' },
      { name: 'outputs/a.txt', body: Buffer.from('a') },
    ]);
    const got = await importTar(Readable.from([archive]), store.fs, { maxBytes: 100 }, 1);
    const files = await tarEntries(exportTar(got.cid, store.fs, 'x'));
    expect([...files.keys()]).toEqual(['a.txt']);
  });

  const hostile: [string, Entry[], RegExp][] = [
    ['a path climbing out', [{ name: '../evil', body: Buffer.from('x') }], /'\.\.\/evil': paths with '\.\.' are refused/],
    ['a path climbing out midway', [{ name: 'a/../../evil', body: Buffer.from('x') }], /paths with '\.\.' are refused/],
    ['an absolute path', [{ name: '/etc/passwd', body: Buffer.from('x') }], /'\/etc\/passwd': absolute paths are refused/],
    ['a symlink leaving the root', [{ name: 'etc', type: 'symlink', linkname: '/etc' }], /symlink to '\/etc' leaves the archive's root/],
    ['a relative symlink leaving the root', [{ name: 'd/up', type: 'symlink', linkname: '../../x' }], /symlink to '\.\.\/\.\.\/x' leaves the archive's root/],
    ['a hard link leaving the root', [{ name: 'h', type: 'link', linkname: '../secret' }], /hard link to '\.\.\/secret' leaves the archive's root/],
    ['a link inside the root', [{ name: 'a', body: Buffer.from('x') }, { name: 'b', type: 'symlink', linkname: 'a' }], /only regular files and directories are stored/],
    ['a fifo', [{ name: 'p', type: 'fifo' }], /a fifo is refused/],
    // The importer would keep one of the two and drop the other without a word.
    ['a file, then an entry inside it', [{ name: 'a', body: Buffer.from('1') }, { name: 'a/b', body: Buffer.from('2') }], /^tar entry 'a\/b' is inside 'a', which the archive has as a file$/],
    ['an entry inside a path, then a file there', [{ name: 'a/b', body: Buffer.from('2') }, { name: 'a', body: Buffer.from('1') }], /^tar entry 'a' is a file, but the archive has a directory 'a'$/],
    ['a file, then a directory of its name', [{ name: 'a', body: Buffer.from('1') }, { name: 'a/', type: 'directory' }], /^tar entry 'a' is a directory, but the archive has a file 'a'$/],
    ['a directory, then a file of its name', [{ name: 'a', type: 'directory' }, { name: 'a', body: Buffer.from('1') }], /^tar entry 'a' is a file, but the archive has a directory 'a'$/],
    ['a file deep inside a file', [{ name: 'x/a', body: Buffer.from('1') }, { name: 'x/a/b/c', body: Buffer.from('2') }], /^tar entry 'x\/a\/b\/c' is inside 'x\/a', which the archive has as a file$/],
  ];
  for (const [what, entries, error] of hostile) {
    it(`refuses a tar with ${what}`, async () => {
      await expect(importTar(Readable.from([await makeTar(entries)]), store.fs, { maxBytes: 100 })).rejects.toThrow(error);
    });
  }

  it('keeps what a directory holds when the archive names the directory again, or after its files', async () => {
    const plain = await importTar(Readable.from([await makeTar([{ name: 'a', type: 'directory' }, { name: 'a/b', body: Buffer.from('2') }])]), store.fs, { maxBytes: 100 });
    for (const entries of [
      [{ name: 'a/b', body: Buffer.from('2') }, { name: 'a', type: 'directory' }],
      [{ name: 'a', type: 'directory' }, { name: 'a/b', body: Buffer.from('2') }, { name: 'a/', type: 'directory' }],
    ] as Entry[][]) {
      const got = await importTar(Readable.from([await makeTar(entries)]), store.fs, { maxBytes: 100 });
      expect(got.cid.toString()).toBe(plain.cid.toString());
      expect([...(await tarEntries(exportTar(got.cid, store.fs, 'x'))).keys()]).toEqual(['a', 'a/b']);
    }
  });

  it(`refuses a path deeper than ${MAX_PATH_DEPTH} components, naming it and the bound, before the importer recurses over it`, async () => {
    const deep = (levels: number) => `${'d/'.repeat(levels - 1)}f`;
    const ok = await importTar(Readable.from([await makeTar([{ name: deep(MAX_PATH_DEPTH), body: Buffer.from('x') }])]), store.fs, { maxBytes: 100 });
    expect([...(await tarEntries(exportTar(ok.cid, store.fs, 'x'))).keys()]).toContain(deep(MAX_PATH_DEPTH));
    // 2,000 levels overflowed the stack in the importer's directory flush (and V8 logged the bundled source twice).
    for (const levels of [MAX_PATH_DEPTH + 1, 2000, 20_000]) {
      const refused = importTar(Readable.from([await makeTar([{ name: deep(levels), body: Buffer.from('x') }])]), store.fs, { maxBytes: 100 });
      await expect(refused).rejects.toMatchObject({ kind: 'invalid', message: `tar entry '${'d/'.repeat(100)}…' has ${levels} path components: at most ${MAX_PATH_DEPTH} are stored` });
    }
  });

  it(`refuses a directory on disk deeper than ${MAX_PATH_DEPTH} levels, naming it`, async () => {
    const dir = tmp();
    const deep = join(dir, ...Array.from({ length: MAX_PATH_DEPTH }, () => 'd'));
    mkdirSync(deep, { recursive: true });
    writeFileSync(join(deep, 'f'), 'x');
    await expect(importPath(dir, store.fs, { maxBytes: 100 })).rejects.toMatchObject({ kind: 'invalid', message: `${join(deep, 'f')}: ${MAX_PATH_DEPTH + 1} levels below ${dir}: at most ${MAX_PATH_DEPTH} are stored` });
    rmSync(join(deep, 'f'));
    writeFileSync(join(deep, '..', 'f'), 'x');
    expect((await importPath(dir, store.fs, { maxBytes: 100 })).kind).toBe('directory');
  });

  it('refuses an entry whose name is not UTF-8, in a tar (its USTAR name or its PAX path) and on disk, naming it', async () => {
    // Read as UTF-8, the bytes 0xFF and 0xFE were both U+FFFD: one such name was stored changed,
    // and two files under them were one name twice.
    const ustar = await makeTar([{ name: 'ok.txt', body: Buffer.from('1') }, { name: 'XX.txt', body: Buffer.from('2') }]);
    rawName(ustar, 512 * 2, [0xff, 0xfe]);
    await expect(importTar(Readable.from([ustar]), store.fs, { maxBytes: 100 })).rejects.toThrow(/^tar entry '\uFFFD\uFFFD\.txt': its name is not UTF-8 text, and UnixFS names are$/);
    // A PAX path record, as Docker's archive writes a name that is not ASCII.
    const long = `p/${'q'.repeat(120)}XX`;
    const pax = await makeTar([{ name: long, body: Buffer.from('3') }]);
    const at = pax.indexOf(Buffer.from(long));
    pax[at + long.length - 2] = 0xff;
    pax[at + long.length - 1] = 0xfe;
    await expect(importTar(Readable.from([pax]), store.fs, { maxBytes: 100 })).rejects.toThrow(/its name is not UTF-8 text/);
    const dir = tmp();
    writeFileSync(join(dir, 'ok.txt'), '1');
    writeFileSync(Buffer.concat([Buffer.from(`${dir}/`), Buffer.from([0xff])]), '2');
    await expect(importPath(dir, store.fs, { maxBytes: 100 })).rejects.toThrow(/\/\uFFFD: its name is not UTF-8 text/);
  });

  it('refuses to export a DAG deeper than any import makes (a stranger\'s), without overflowing the stack', async () => {
    // Blocks a hostile node could send: a chain of 20,000 directories, each holding the next
    // (a worker thread's stack outlasted 3,000 generators; the main thread's did not).
    const held = new Map<string, Uint8Array>();
    const chain = { get: async function* (cid: CID) { yield held.get(cid.toString())!; } } as unknown as typeof store.fs;
    let [cid, bytes] = block(raw.code, Buffer.from('x'));
    held.set(cid.toString(), bytes);
    let name = 'f';
    for (let i = 0; i < 20_000; i++) {
      [cid, bytes] = block(dagPb.code, dagPb.encode(dagPb.prepare({ Data: new UnixFS({ type: 'directory' }).marshal(), Links: [{ Hash: cid, Tsize: 1, Name: name }] })));
      held.set(cid.toString(), bytes);
      name = 'd';
    }
    await expect(tarEntries(exportTar(cid, chain, 'x'))).rejects.toThrow(`directory entry '${'d/'.repeat(100)}…' is deeper than ${MAX_PATH_DEPTH} levels`);
  });

  it('refuses content past the limit, naming it', async () => {
    const archive = await makeTar([{ name: 'a.bin', body: big }]);
    await expect(importTar(Readable.from([archive]), store.fs, { maxBytes: 1024 * 1024 })).rejects.toMatchObject({ kind: 'too_large', message: expect.stringMatching(/larger than the limit of 1 MiB/) });
    await expect(importFile(Readable.from([big]), store.fs, { maxBytes: 1000 })).rejects.toMatchObject({ kind: 'too_large' });
  });

  it('refuses bytes that are not a tar', async () => {
    await expect(importTar(Readable.from([randomBytes(4096)]), store.fs, { maxBytes: 1e6 })).rejects.toMatchObject({ kind: 'invalid' });
  });

  it('stores a block from outside only when it is the block its CID names', async () => {
    const bytes = Buffer.from('block');
    const cid = CID.createV1(0x55, await sha256.digest(bytes));
    expect(await store.putVerified(cid, Buffer.from('other'))).toBe(false);
    expect(await store.has(cid)).toBe(false);
    expect(await store.putVerified(cid, bytes)).toBe(true);
    expect(Buffer.from(await store.get(cid))).toEqual(bytes);
  });

  it('refuses CIDs of another version, hash or codec', async () => {
    expect(() => parseCid('QmYwAPJzv5CZsnA625s3Xf2nemtYgPpHdWEz79ojWnPbdG')).toThrow(/only CIDv1 is stored/);
    const bytes = Buffer.from('x');
    const other512 = CID.createV1(0x55, await sha512.digest(bytes)).toString();
    const cbor = CID.createV1(0x71, await sha256.digest(bytes)).toString();
    expect(() => parseCid(other512)).toThrow(/hash 0x13: only sha2-256/);
    expect(() => parseCid(cbor)).toThrow(/codec 0x71: only raw and dag-pb/);
    expect(() => parseCid('not-a-cid')).toThrow(/is not a CID/);
  });
});
