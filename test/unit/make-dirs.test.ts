import { existsSync, lstatSync, mkdtempSync, rmSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { makeDirs, makeDirsAsync } from '../../runtime/files.js';

const root = mkdtempSync(join(tmpdir(), 'dms-dirs-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));

/** runtime/files.ts: `mkdir -p` that ends, where Node 20's recursive mkdir looped for ever under /proc. */
describe.each([
  ['makeDirs', async (p: string, mode?: number) => makeDirs(p, mode)],
  ['makeDirsAsync', makeDirsAsync],
])('%s', (name, make) => {
  it('makes every missing level with the mode asked, and is content when they exist', async () => {
    const deep = join(root, name, 'a', 'b', 'c');
    await make(deep, 0o700);
    for (const dir of [join(root, name), join(root, name, 'a'), deep]) expect(statSync(dir).mode & 0o777).toBe(0o700);
    await make(deep, 0o700);
    await make(join(root, name, 'a'));
  });

  it('names the folder it cannot make: under a file, under a dangling link, under /proc', async () => {
    const file = join(root, `${name}-file`);
    writeFileSync(file, 'x');
    await expect(make(join(file, 'sub'))).rejects.toThrow(`cannot make the folder '${join(file, 'sub')}' (ENOTDIR)`);
    const link = join(root, `${name}-dangling`);
    symlinkSync(join(root, 'nowhere'), link);
    await expect(make(join(link, 'sub'))).rejects.toThrow(/cannot make the folder .*-dangling/);
    expect(lstatSync(link).isSymbolicLink()).toBe(true);
    if (existsSync('/proc/self')) await expect(make('/proc/dms-no-such/x')).rejects.toThrow("cannot make the folder '/proc/dms-no-such' (ENOENT)");
  });
});
