// Which directory each output needs made before its job starts (actors/executors/output-dirs.ts).
import { describe, expect, it } from 'vitest';
import { outputDirs } from '../../actors/executors/output-dirs.js';
import { namesAFile } from '../../behaviors/jobs/files.js';

describe("an output's directory", () => {
  it('is the path itself unless its last name has an extension, which names a file', () => {
    expect(['/outputs', '/out/sub', '/data.d/', '/.cache', '/a/.hidden', '/results/v1.0'].map(namesAFile)).toEqual([false, false, true, false, false, true]);
    expect(['/out/model.bin', '/result.txt', '//x//y.tar.gz'].map(namesAFile)).toEqual([true, true, true]);
  });

  it("is made once for outputs that share it, and never for the container's root", () => {
    expect(
      outputDirs([
        { name: 'a', path: '/outputs' },
        { name: 'b', path: '/outputs/' },
        { name: 'c', path: '/outputs/model.bin' },
        { name: 'd', path: '/result.txt' },
        { name: 'e', path: '//deep//er/out' },
      ]),
    ).toEqual(['/outputs', '/deep/er/out']);
  });
});
