import { readFileSync } from 'node:fs';

/**
 * This package's version, read from its package.json when asked, so it is never a copy that
 * drifts. The file sits two levels above the built dist/cli/ and one above cli/ when run
 * from the sources.
 */
export function packageVersion(): string {
  for (const rel of ['../../package.json', '../package.json']) {
    try {
      const pkg = JSON.parse(readFileSync(new URL(rel, import.meta.url), 'utf8')) as { name?: string; version?: string };
      if (pkg.name === 'dms' && pkg.version) return pkg.version;
    } catch {
      // not at this level
    }
  }
  return 'unknown';
}
