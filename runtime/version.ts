import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

/**
 * This package's folder (where its package.json is) and its version, read when asked, so the
 * version is never a copy that drifts. The package.json is one folder above this module's, from
 * the sources and from the bundled dist/ (scripts/bundle.mjs); two above where tsc's layout put
 * it (dist/runtime/). The name is checked, so a package.json of whatever surrounds an installed
 * copy is never taken for this one.
 */
function ownPackage(): { dir: string; version: string } | null {
  for (const rel of ['../', '../../']) {
    try {
      const dir = new URL(rel, import.meta.url);
      const pkg = JSON.parse(readFileSync(new URL('package.json', dir), 'utf8')) as { name?: string; version?: string };
      if (pkg.name === 'dms' && pkg.version) return { dir: fileURLToPath(dir), version: pkg.version };
    } catch {
      // not at this level
    }
  }
  return null;
}

export function packageVersion(): string {
  return ownPackage()?.version ?? 'unknown';
}

/** The installed package's folder (ending in a separator), or null when it cannot be found. */
export function packageDir(): string | null {
  return ownPackage()?.dir ?? null;
}
