import { fileURLToPath, pathToFileURL } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { type Variant, type VariantSpec, VERIFY_FREE, variantBuild } from '../../bench/lib/variant-build.js';
import { KeyPair } from '../../runtime/crypto/keys.js';

/*
 * The benches compare this build with copies that have one thing taken out (bench/lib/
 * variant-build.ts). A copy is built by pattern from dist/, so a change to the code it edits
 * silently turned the comparison into dist against itself once (bench:invoke's dev-mode-off part
 * looked for a hook name the kernel no longer used, and threw). These run on the build that
 * `npm test` has just made.
 */
const built: Variant[] = [];
afterAll(() => built.forEach((v) => v.remove()));
const build = (spec: VariantSpec) => {
  const v = variantBuild(spec);
  built.push(v);
  return v;
};
/** The program of a copy, loaded as the copy's `dms` loads it. */
const programOf = async (cli: string) => {
  const { loadBundle } = (await import(new URL('../lib/code-cache.js', pathToFileURL(cli)).href)) as typeof import('../../runtime/code-cache.js');
  return loadBundle(fileURLToPath(new URL('../lib/dms.cjs', pathToFileURL(cli)))) as typeof import('../../cli/dms.js');
};

describe('bench variant builds', () => {
  it('the verify-free copy accepts a forged signature in every implementation, sync and async, where the real build refuses it', async () => {
    const v = build(VERIFY_FREE);
    expect(v.hits).toBe(3);
    const real = await import('../../runtime/crypto/ed25519.js');
    const copy = (await programOf(v.cli)).ed25519;
    const key = KeyPair.generate();
    const data = Buffer.from('dms:msg:{}');
    const forged = new Uint8Array(64).fill(7);
    expect(copy.implementations().map((i) => i.name)).toEqual(real.implementations().map((i) => i.name));
    for (const [i, impl] of real.implementations().entries()) {
      const publicKey = new real.VerifyKey(key.publicKey);
      expect(impl.verifySync(publicKey, data, forged), impl.name).toBe(false);
      expect(await impl.verify(publicKey, data, forged), impl.name).toBe(false);
      const copied = copy.implementations()[i]!;
      const copiedKey = new copy.VerifyKey(key.publicKey);
      expect(copied.verifySync(copiedKey, data, forged), impl.name).toBe(true);
      expect(await copied.verify(copiedKey, data, forged), impl.name).toBe(true);
    }
  });

  it('a variant whose pattern no longer matches the build fails instead of copying dist unchanged', () => {
    expect(() => variantBuild({ ...VERIFY_FREE, dir: 'dist-novariant', pattern: /\bnoSuchHookAnywhere\b/g })).toThrowError(/found 0 Ed25519 verify calls/);
  });
});
