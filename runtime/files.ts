import { chmodSync, existsSync, mkdirSync, renameSync, writeFileSync } from 'node:fs';
import { access, mkdir } from 'node:fs/promises';
import { dirname, resolve } from 'node:path';
import { DmsError } from './errors.js';

/**
 * Writes `value` as indented JSON by write-then-rename: rename is atomic, so a reader (a node
 * starting, a CLI reading the runtime file) never sees half a file. With `mode` the file gets
 * exactly that mode whatever the umask (secrets: 0o600); a missing directory is made owner-only.
 */
export function writeJsonAtomic(path: string, value: unknown, mode?: number): void {
  makeDirs(dirname(path), 0o700);
  const tmp = `${path}.${process.pid}.tmp`;
  writeFileSync(tmp, JSON.stringify(value, null, 2) + '\n', mode === undefined ? undefined : { mode });
  if (mode !== undefined) chmodSync(tmp, mode);
  renameSync(tmp, path);
}

/**
 * `mkdir -p`, each missing folder made in turn from the top. Node 20's own (`recursive: true`)
 * retries for ever where mkdir answers ENOENT under a parent that exists: `dms --home /proc/x
 * init` hung, as did a code cache or an output folder there. Here that is an error naming the folder.
 */
export function makeDirs(path: string, mode?: number): void {
  for (const dir of missingLevels(path, existsSync)) {
    try {
      mkdirSync(dir, { mode });
    } catch (e) {
      cannotMake(dir, e);
    }
  }
}

/** makeDirs on the thread pool. */
export async function makeDirsAsync(path: string, mode?: number): Promise<void> {
  const levels: string[] = [];
  for (let p = resolve(path); dirname(p) !== p && !(await access(p).then(() => true, () => false)); p = dirname(p)) levels.push(p);
  for (const dir of levels.reverse()) {
    try {
      await mkdir(dir, { mode });
    } catch (e) {
      cannotMake(dir, e);
    }
  }
}

/** The folders of `path` that do not exist yet, the topmost first. */
function missingLevels(path: string, exists: (p: string) => boolean): string[] {
  const levels: string[] = [];
  for (let p = resolve(path); !exists(p) && dirname(p) !== p; p = dirname(p)) levels.push(p);
  return levels.reverse();
}

function cannotMake(dir: string, e: unknown): void {
  const code = (e as NodeJS.ErrnoException).code;
  // Made meanwhile by someone else: what was wanted.
  if (code === 'EEXIST') return;
  throw new DmsError('invalid', `cannot make the folder '${dir}' (${code ?? (e as Error).message})`);
}
