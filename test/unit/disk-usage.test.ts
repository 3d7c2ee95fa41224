// What a volume's directory takes on disk (runtime/volumes.ts diskUsage), which bounds what jobs
// write into it (actors/executors/storage-watch.ts): blocks allocated, every entry at least
// ENTRY_BYTES, a file linked twice once, a walk that stops once past its bound, a directory
// swapped for a file mid-walk passed over, and a directory the node cannot read named rather than
// passed over. On a real temporary directory.
import { execFile } from 'node:child_process';
import { chmodSync, linkSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { promisify } from 'node:util';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { diskUsage, ENTRY_BYTES } from '../../runtime/volumes.js';
import { VOLUMES_LABEL, volumeOver, volumesOf } from '../../actors/executors/storage-watch.js';

/**
 * Directories a job turns into files just as the walk opens them: the moment between the walk's
 * lstat and its opendir, which a real job can only hit by chance. Every other opendir is the
 * real one, and so is the swap's: the file system answers ENOTDIR itself.
 */
const swapToFile = vi.hoisted(() => new Set<string>());
vi.mock('node:fs/promises', async (importOriginal) => {
  const real = await importOriginal<typeof import('node:fs/promises')>();
  const { rmSync: rm, writeFileSync: write } = await import('node:fs');
  const opendir: typeof real.opendir = async (path, options) => {
    if (swapToFile.delete(String(path))) {
      rm(path, { recursive: true });
      write(path, 'a file now');
    }
    return real.opendir(path, options);
  };
  return { ...real, opendir };
});

const MiB = 1024 * 1024;
let dir: string;

beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'dms-du-'));
});

afterEach(() => {
  chmodSync(dir, 0o755);
  rmSync(dir, { recursive: true, force: true });
});

describe('diskUsage', () => {
  it('counts what files hold on disk, each entry at least ENTRY_BYTES, and a hard-linked file once', async () => {
    mkdirSync(join(dir, 'sub/deeper'), { recursive: true });
    writeFileSync(join(dir, 'sub/deeper/a.bin'), Buffer.alloc(MiB, 1));
    writeFileSync(join(dir, 'empty'), '');
    linkSync(join(dir, 'sub/deeper/a.bin'), join(dir, 'again.bin'));
    const { bytes, unreadable } = await diskUsage(dir, Number.MAX_SAFE_INTEGER);
    expect(unreadable).toBeUndefined();
    // 1 MiB of content once, and sub, deeper and empty at their floor (a directory's own block at least).
    expect(bytes).toBeGreaterThanOrEqual(MiB + 3 * ENTRY_BYTES);
    expect(bytes).toBeLessThan(MiB + 8 * ENTRY_BYTES);
  });

  it('charges empty files, so their number is bounded by the size too', async () => {
    for (let i = 0; i < 100; i++) writeFileSync(join(dir, `e${i}`), '');
    expect((await diskUsage(dir, Number.MAX_SAFE_INTEGER)).bytes).toBe(100 * ENTRY_BYTES);
  });

  it('does not count a sparse file\'s hole, which takes no disk', async () => {
    writeFileSync(join(dir, 'sparse'), '');
    await promisify(execFile)('truncate', ['-s', '1G', join(dir, 'sparse')]);
    expect((await diskUsage(dir, Number.MAX_SAFE_INTEGER)).bytes).toBe(ENTRY_BYTES);
  });

  it('stops counting once past its bound, so a walk costs what the bound allows, not what was written', async () => {
    for (let i = 0; i < 1000; i++) writeFileSync(join(dir, `e${i}`), '');
    const { bytes } = await diskUsage(dir, 10 * ENTRY_BYTES);
    expect(bytes).toBeGreaterThan(10 * ENTRY_BYTES);
    // One batch of entries past the bound at most, not the thousand.
    expect(bytes).toBeLessThanOrEqual(64 * ENTRY_BYTES);
  });

  it('says when it holds more files and directories than a walk measures, rather than counting only those it saw', async () => {
    mkdirSync(join(dir, 'a/b'), { recursive: true });
    for (let i = 0; i < 100; i++) writeFileSync(join(dir, 'a/b', `e${i}`), '');
    expect(await diskUsage(dir, Number.MAX_SAFE_INTEGER, 50)).toMatchObject({ tooMany: true });
    expect(await diskUsage(dir, Number.MAX_SAFE_INTEGER, 500)).toEqual({ bytes: 102 * ENTRY_BYTES });
    // Past its size before it ran out of entries: the size is what it says.
    expect((await diskUsage(dir, 10 * ENTRY_BYTES, 50)).tooMany).toBeUndefined();
  });

  it('passes over a directory that became a file after it was listed, and counts the rest', async () => {
    mkdirSync(join(dir, 'swapped'), { recursive: true });
    writeFileSync(join(dir, 'swapped/inside'), Buffer.alloc(MiB, 1));
    writeFileSync(join(dir, 'kept'), Buffer.alloc(MiB, 1));
    swapToFile.add(join(dir, 'swapped'));
    const usage = await diskUsage(dir, Number.MAX_SAFE_INTEGER);
    expect(swapToFile.size).toBe(0);
    expect(usage.unreadable).toBeUndefined();
    // kept's MiB and swapped's entry as its lstat found it (a directory); what it held is gone.
    expect(usage.bytes).toBeGreaterThanOrEqual(MiB + ENTRY_BYTES);
    expect(usage.bytes).toBeLessThan(MiB + 4 * ENTRY_BYTES);
  });

  it('counts nothing for a directory that is gone', async () => {
    expect(await diskUsage(join(dir, 'never-made'), MiB)).toEqual({ bytes: 0 });
  });

  // Root reads every directory: the check runs as nobody in a child process when the tests run as root.
  it('names a directory in it that the node cannot read, rather than counting it empty', async () => {
    mkdirSync(join(dir, 'open/hidden'), { recursive: true });
    writeFileSync(join(dir, 'open/hidden/big'), Buffer.alloc(MiB));
    chmodSync(join(dir, 'open/hidden'), 0o000);
    chmodSync(dir, 0o755);
    if (process.getuid?.() !== 0) {
      expect((await diskUsage(dir, Number.MAX_SAFE_INTEGER)).unreadable).toBe('open/hidden');
      return;
    }
    const tsx = pathToFileURL(join(process.cwd(), 'node_modules/tsx/dist/esm/index.mjs')).href;
    const volumes = pathToFileURL(join(process.cwd(), 'runtime/volumes.ts')).href;
    const script = `import(${JSON.stringify(volumes)}).then(async (m) => process.stdout.write(JSON.stringify(await m.diskUsage(${JSON.stringify(dir)}, Number.MAX_SAFE_INTEGER))))`;
    const { stdout } = await promisify(execFile)(process.execPath, ['--import', tsx, '-e', script], { uid: 65534, gid: 65534, cwd: tmpdir(), timeout: 20_000 });
    expect(JSON.parse(stdout)).toMatchObject({ unreadable: 'open/hidden' });
  });
});

describe('a volume past its size', () => {
  it('is named with its size, and one within it is not', async () => {
    writeFileSync(join(dir, 'a'), Buffer.alloc(2 * MiB, 1));
    expect(await volumeOver([{ name: 'roomy', dir, size: 4 * MiB }])).toBeUndefined();
    expect(await volumeOver([{ name: 'roomy', dir, size: 4 * MiB }, { name: 'tight', dir, size: MiB }])).toMatch(/^wrote into volume tight until it held more than its size, 1 MiB \(at least 2 MiB counted\)$/);
  });

  it('is read back from a container\'s labels, and labels that say nothing readable give none', () => {
    const volumes = [{ name: 'data', dir: '/home/x/data/volumes/data/data', size: MiB }];
    expect(volumesOf({ [VOLUMES_LABEL]: JSON.stringify(volumes) })).toEqual(volumes);
    expect(volumesOf({})).toEqual([]);
    expect(volumesOf({ [VOLUMES_LABEL]: '{not json' })).toEqual([]);
    expect(volumesOf({ [VOLUMES_LABEL]: '[{"name":"x","dir":3,"size":1}]' })).toEqual([]);
  });
});
