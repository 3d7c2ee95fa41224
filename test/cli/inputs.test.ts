import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { inputsOf, splitInput, volumeInput } from '../../cli/inputs.js';
import type { RestClient } from '../../client/rest.js';

/** A client that must not be called: nothing here is uploaded. */
const noRest = new Proxy({}, { get: () => () => expect.fail('nothing is uploaded') }) as unknown as RestClient;

describe('dms run -i SOURCE:PATH (cli/inputs.ts)', () => {
  const dir = mkdtempSync(join(tmpdir(), 'dms-inputs-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it('splits at the last colon before an absolute container path, and refuses a relative one', () => {
    expect(splitInput('./a:b/c:/inputs')).toEqual({ source: './a:b/c', path: '/inputs' });
    expect(() => splitInput('./d:relative')).toThrow("--input: './d:relative' is not source:/path/in/the/container");
  });

  it('refuses a local path that is not there, naming it, instead of sending it to the node as a CID', async () => {
    for (const source of ['/nonexistent', './missing', '../x/y', '~/data', join(dir, 'gone')]) {
      await expect(inputsOf(noRest, [`${source}:/inputs`])).rejects.toThrow(`--input: there is no file or directory ${source} to upload (or give a CID, job:<id>/<output> or volume:<name>)`);
    }
  });

  it('gives the node a CID, a job output or a volume as written', async () => {
    const sources = ['bafkreigh2akiscaildcqabsyg3dfr6chu3fgpregiymsck7e7aqa4s52zy', 'job:3f2a9c10-0000-4000-8000-000000000001/out', 'volume:data'];
    expect(await inputsOf(noRest, sources.map((s) => `${s}:/in`))).toEqual(sources.map((source) => ({ source, path: '/in' })));
  });

  it('mounts a volume writable with -v NAME:/path, read-only with :ro, after the -i inputs', async () => {
    expect(volumeInput('data:/data')).toEqual({ source: 'volume:data', path: '/data', writable: true });
    expect(volumeInput('data:/data:rw')).toEqual({ source: 'volume:data', path: '/data', writable: true });
    expect(volumeInput('volume:data:/data')).toEqual({ source: 'volume:data', path: '/data', writable: true });
    expect(volumeInput('data:/data:ro')).toEqual({ source: 'volume:data', path: '/data' });
    expect(await inputsOf(noRest, ['volume:a:/a'], ['b:/b'])).toEqual([{ source: 'volume:a', path: '/a' }, { source: 'volume:b', path: '/b', writable: true }]);
  });

  it('refuses a -v that is not name:/path[:ro], or that names a local directory, before anything is uploaded', async () => {
    for (const bad of ['data', 'data:relative', 'data:/x:rx', ':/x', 'data:/a:b:ro']) {
      expect(() => volumeInput(bad), bad).toThrow(/^--volume: /);
    }
    expect(() => volumeInput('./data:/data')).toThrow("--volume: './data' is a local path, not a volume's name: -i ./data:/data uploads it and mounts it read-only, and `dms volume create` makes a volume");
    // The upload of -i's directory would come first; the bad -v stops the run before it.
    await expect(inputsOf(noRest, [`${dir}:/in`], ['~/d:/d'])).rejects.toThrow("--volume: '~/d' is a local path");
  });
});
