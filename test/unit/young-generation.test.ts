import { execFileSync } from 'node:child_process';
import { beforeAll, describe, expect, it } from 'vitest';

// V8's flags are the process's own, so the module is tried in a child process. Node ignores an
// unknown flag without a word: this fails if a Node upgrade renames or drops the one it sets.
const MODULE = new URL('../../runtime/young-generation.ts', import.meta.url).href;
const SCRIPT = `
import { holdYoungGeneration, releaseYoungGeneration, withStartFlags } from ${JSON.stringify(MODULE)};
import { cachedDataVersionTag, getHeapSpaceStatistics } from 'node:v8';
const young = () => getHeapSpaceStatistics().find((s) => s.space_name === 'new_space').space_size;
const kept = [];
// Objects that all survive, as start-up's do: what makes V8 grow the young generation.
const survivors = () => { for (let i = 0; i < 300_000; i++) kept.push({ i, s: 'x' + i }); };
const tags = { default: cachedDataVersionTag() };
holdYoungGeneration();
tags.held = cachedDataVersionTag();
tags.madeWhileHeld = withStartFlags(() => cachedDataVersionTag());
tags.afterMadeWhileHeld = cachedDataVersionTag();
const before = young();
survivors();
const held = young();
releaseYoungGeneration();
tags.released = cachedDataVersionTag();
tags.madeWhileReleased = withStartFlags(() => cachedDataVersionTag());
tags.afterMadeWhileReleased = cachedDataVersionTag();
survivors();
console.log(JSON.stringify({ before, held, released: young(), kept: kept.length, tags }));
`;

describe('the young generation while the program starts', () => {
  let run: { before: number; held: number; released: number; kept: number; tags: Record<string, number> };
  beforeAll(() => {
    run = JSON.parse(execFileSync(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', SCRIPT], { encoding: 'utf8', timeout: 20_000 }));
  });

  it('does not grow while held, and grows again once released', () => {
    expect(run.kept).toBe(600_000);
    expect(run.held).toBeLessThanOrEqual(run.before);
    expect(run.released).toBeGreaterThan(run.held);
  });

  it('makes code caches under the flags the program was compiled under, and puts back the process’s after', () => {
    // V8's flag hash, which a code cache carries and is refused by when it differs.
    const t = run.tags;
    expect(t.held).not.toBe(t.default);
    expect([t.madeWhileHeld, t.afterMadeWhileHeld, t.madeWhileReleased]).toEqual([t.held, t.held, t.held]);
    expect([t.released, t.afterMadeWhileReleased]).toEqual([t.default, t.default]);
  });
});
