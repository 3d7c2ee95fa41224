/**
 * Block stores for tests that need one on disk and nothing else: each an empty store opened in a
 * folder of its own under the system's temporary directory, every folder removed once the test
 * file's cases are done (the hook is the calling file's).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll } from 'vitest';
import { BlockStore } from '../../runtime/blocks/store.js';

/** Folders and stores named `prefix…`, removed after the calling file's cases. */
export function tempStores(prefix: string) {
  const dirs: string[] = [];
  afterAll(() => dirs.forEach((d) => rmSync(d, { recursive: true, force: true })));
  /** An empty folder of its own. */
  const folder = (): string => {
    const d = mkdtempSync(join(tmpdir(), prefix));
    dirs.push(d);
    return d;
  };
  /** An empty block store, opened, in `blocks/` of a folder of its own. */
  const store = async (): Promise<BlockStore> => {
    const s = new BlockStore(join(folder(), 'blocks'));
    await s.open();
    return s;
  };
  return { folder, store };
}
