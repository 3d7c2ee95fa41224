import { cpSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

/**
 * A copy of this checkout's build with the dev stream compiled out: the baseline for "the
 * stream code costs nothing while nobody watches". The kernel asks `events.observed` before
 * building any dev event; the copy has `false` there instead, so V8 drops those branches and
 * the copy runs the message path as a node without the dev stream would. Everything else is
 * the same build, byte for byte.
 *
 * The copy sits beside dist/ (dist-nostream/, which .gitignore lists), so it resolves
 * node_modules and ../package.json as dist does. Returns its `dms` entry point, how many
 * hooks it compiled out, and a remover.
 */
export function streamFreeBuild(): { cli: string; hooks: number; remove(): void } {
  const dist = fileURLToPath(new URL('../../dist/', import.meta.url));
  const copy = fileURLToPath(new URL('../../dist-nostream/', import.meta.url));
  rmSync(copy, { recursive: true, force: true });
  cpSync(dist, copy, { recursive: true });
  const hook = /\bthis\.(?:system\.)?events\.observed\b/g;
  let hooks = 0;
  for (const file of readdirSync(copy, { recursive: true, encoding: 'utf8' })) {
    if (!file.endsWith('.js')) continue;
    const text = readFileSync(copy + file, 'utf8');
    const found = text.match(hook)?.length ?? 0;
    if (found === 0) continue;
    hooks += found;
    writeFileSync(copy + file, text.replace(hook, 'false'));
  }
  // Comparing two identical builds would prove nothing: a kernel whose hooks look different
  // now fails the bench loudly.
  if (hooks < 4) throw new Error(`found ${hooks} dev stream hooks in dist/, expected at least 4: update bench/lib/stream-free.ts`);
  return { cli: `${copy}cli/main.js`, hooks, remove: () => rmSync(copy, { recursive: true, force: true }) };
}
