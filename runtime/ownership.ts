import type { Stats } from 'node:fs';

/**
 * Why a file (or folder) must not be trusted, if it must not: someone other than the user running
 * `dms` owns it or could have written it. A dms_config.json in the working directory (wherever
 * `dms` happens to be run: a shared or downloaded directory, /tmp) would let them choose the
 * node's listen address, credentials policy or plugins (runtime/config-file.ts); a code cache,
 * the bytecode the program runs (runtime/code-cache.ts). The home's config file and `--config`
 * are the user's own choice and are read as they are.
 */
export function distrustReason(st: Pick<Stats, 'uid' | 'mode'>, uid: number | undefined = process.getuid?.()): string | undefined {
  if (uid === undefined) return undefined; // no owners to compare (Windows)
  if (st.uid !== uid) return `owned by uid ${st.uid}, not by the user running dms (uid ${uid})`;
  const mode = `mode ${(st.mode & 0o777).toString(8).padStart(4, '0')}`;
  if (st.mode & 0o002) return `writable by others (${mode})`;
  if (st.mode & 0o020) return `writable by its group (${mode})`;
  return undefined;
}
