import { readFileSync } from 'node:fs';

/**
 * This package's version, read from its package.json when asked, so it is never a copy that
 * drifts. It is one folder above this module's, from the sources and from the bundled dist/
 * (scripts/bundle.mjs); two above where tsc's layout put it (dist/runtime/). The name is checked,
 * so a package.json of whatever surrounds an installed copy is never taken for this one.
 */
export function packageVersion(): string {
  for (const rel of ['../package.json', '../../package.json']) {
    try {
      const pkg = JSON.parse(readFileSync(new URL(rel, import.meta.url), 'utf8')) as { name?: string; version?: string };
      if (pkg.name === 'dms' && pkg.version) return pkg.version;
    } catch {
      // not at this level
    }
  }
  return 'unknown';
}
