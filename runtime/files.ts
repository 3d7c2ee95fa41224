import { chmodSync, mkdirSync, renameSync, writeFileSync } from 'node:fs';
import { dirname } from 'node:path';

/**
 * Writes `value` as indented JSON by write-then-rename: rename is atomic, so a reader (a node
 * starting, a CLI reading the runtime file) never sees half a file. With `mode` the file gets
 * exactly that mode whatever the umask (secrets: 0o600); a missing directory is made owner-only.
 */
export function writeJsonAtomic(path: string, value: unknown, mode?: number): void {
  mkdirSync(dirname(path), { recursive: true, mode: 0o700 });
  const tmp = `${path}.${process.pid}.tmp`;
  writeFileSync(tmp, JSON.stringify(value, null, 2) + '\n', mode === undefined ? undefined : { mode });
  if (mode !== undefined) chmodSync(tmp, mode);
  renameSync(tmp, path);
}
