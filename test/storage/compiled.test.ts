// Storage must work from tsc's output as well as from the sources: migrations are passed
// as classes, not found by a path glob that would differ between the two.
import { execFile } from 'node:child_process';
import { existsSync, readdirSync, statSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { expect, it } from 'vitest';

const root = fileURLToPath(new URL('../../', import.meta.url));
const compiled = join(root, 'dist/lib/dms.cjs');
const loader = join(root, 'dist/lib/code-cache.js');

function newestSource(dir: string): number {
  return Math.max(
    ...readdirSync(dir, { withFileTypes: true }).map((e) =>
      e.isDirectory() ? newestSource(join(dir, e.name)) : e.name.endsWith('.ts') ? statSync(join(dir, e.name)).mtimeMs : 0,
    ),
  );
}

// `npm test` builds first; a bare `vitest run` may find no build, or one older than the code.
const skipReason = !existsSync(compiled)
  ? 'dist/lib/dms.cjs is not built (npm run build)'
  : statSync(compiled).mtimeMs < Math.max(newestSource(join(root, 'storage')), statSync(join(root, 'behaviors/jobs/schema.ts')).mtimeMs)
    ? 'dist/lib/dms.cjs is older than the sources (npm run build)'
    : null;
if (skipReason) console.warn(`skipping compiled storage test: ${skipReason}`);

it.skipIf(skipReason !== null)('opens, migrates and writes from the compiled JavaScript in dist/', async () => {
  const dir = await mkdtemp(join(tmpdir(), 'dms-dist-'));
  try {
    const script = `
      const { loadBundle } = await import(${JSON.stringify(loader)});
      const { openStorage } = loadBundle(${JSON.stringify(compiled)}).storage;
      const s = await openStorage(${JSON.stringify(join(dir, 'dms.db'))});
      const job = await s.jobs.create({ name: 'from-dist', image: 'img', resources: { cpu: { cores: 1 }, memory: { size: 67108864 } } });
      console.log(JSON.stringify(await s.jobs.get(job.id)));
      await s.close();`;
    const { stdout } = await promisify(execFile)(process.execPath, ['--input-type=module', '-e', script], { cwd: dir });
    expect(JSON.parse(stdout)).toMatchObject({ name: 'from-dist', status: 'pending' });
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});
