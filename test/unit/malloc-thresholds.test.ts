import { execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { describe, expect, it } from 'vitest';

// glibc's thresholds are the process's own, so each case runs in a child. What can be seen from
// outside malloc is where a block lands: above the mmap threshold in a mapping of its own, below
// it in the heap (`[heap]` in /proc/self/maps, which grows by the block). `gc()` collects the
// raising block at once instead of at some later collection; V8 may free what a collection found
// dead on a thread of its own, after gc() returns, and finishes that work when the next
// collection begins: so each `collect()` is two.
const MODULE = new URL('../../runtime/malloc-thresholds.ts', import.meta.url).href;
const script = (raise: boolean) => `
import { readFileSync } from 'node:fs';
import { raiseMallocThresholds } from ${JSON.stringify(MODULE)};
const heapMiB = () => {
  const line = readFileSync('/proc/self/maps', 'utf8').split('\\n').find((l) => l.endsWith('[heap]'));
  const [from, to] = line.split(' ')[0].split('-').map((h) => parseInt(h, 16));
  return (to - from) / 1048576;
};
const collect = () => { gc(); gc(); };
if (${raise}) { raiseMallocThresholds(); raiseMallocThresholds(); }
collect();
const start = heapMiB();
let block = Buffer.allocUnsafe(8 * 1048576).fill(1);
const holding = heapMiB() - start;
block = undefined;
collect();
console.log(JSON.stringify({ holding, freed: heapMiB() - start }));
`;
const run = (raise: boolean): { holding: number; freed: number } =>
  JSON.parse(execFileSync(process.execPath, ['--expose-gc', '--import', 'tsx', '--input-type=module', '-e', script(raise)], { encoding: 'utf8', timeout: 20_000 }));

// glibc's behaviour (mallopt(3)); musl and macOS have no dynamic threshold to raise.
const glibc = existsSync('/proc/self/maps') && Boolean((process.report.getReport() as { header?: { glibcVersionRuntime?: string } }).header?.glibcVersionRuntime);

describe.skipIf(!glibc)('glibc malloc thresholds', () => {
  it('maps an 8 MiB block apart from the heap by default', () => {
    expect(run(false).holding).toBeLessThan(1);
  });

  it('once raised, serves it from the heap and keeps that heap after it is freed', () => {
    const { holding, freed } = run(true);
    // The heap may have had some room already: most of the block is what it grew by.
    expect(holding).toBeGreaterThan(6);
    // Returned to the kernel, the heap would be back where it started.
    expect(freed).toBeGreaterThan(6);
  });
});
