import { fileURLToPath, pathToFileURL } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { type Variant, type VariantSpec, VERIFY_FREE, variantBuild } from '../../bench/lib/variant-build.js';
import { KeyPair } from '../../runtime/crypto/keys.js';
import { sodiumPath } from '../../runtime/crypto/sodium.js';
import { VerifyThread as RealThread } from '../../runtime/crypto/verify-thread.js';
import { waitFor } from '../helpers/network.js';

/*
 * The benches compare this build with copies that have one thing taken out (bench/lib/
 * variant-build.ts). A copy is built by pattern from dist/, so a change to the code it edits
 * silently turned the comparison into dist against itself once (bench:invoke's dev-mode-off part
 * looked for a hook name the kernel no longer used, and threw). These run on the build that
 * `npm test` has just made.
 */
const built: Variant[] = [];
const threads: RealThread[] = [];
afterAll(async () => {
  await Promise.all(threads.map((t) => t.close()));
  built.forEach((v) => v.remove());
});
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

let verifyFree: Variant | undefined;
const verifyFreeCopy = () => (verifyFree ??= build(VERIFY_FREE));

describe('bench variant builds', () => {
  it('the verify-free copy accepts a forged signature in every implementation, sync and async, where the real build refuses it', async () => {
    const v = verifyFreeCopy();
    expect(v.hits).toBe(4);
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

  it("the verify-free copy's verify thread accepts a forged signature too, where the real one refuses it", async () => {
    const forged = { key: KeyPair.generate().publicKey, data: Buffer.from('dms:msg:{}'), sig: new Uint8Array(64).fill(7) };
    // Inline checks refuse everything here: a `true` can only have come from the thread.
    const refuse = () => false;
    const verdict = async (make: (check: typeof refuse, path: string) => RealThread) => {
      const t = make(refuse, sodiumPath()!);
      threads.push(t);
      const ask = () => new Promise<boolean>((resolve) => t.verify(forged.key, forged.data, forged.sig, (_err, ok) => resolve(ok)));
      await ask(); // starts the thread, checked inline meanwhile
      await waitFor('the verify thread to start', () => t.ready, { timeoutMs: 10_000, intervalMs: 10 });
      const ok = await ask();
      expect(t.answered).toBe(1);
      return ok;
    };
    const { VerifyThread: CopiedThread } = (await programOf(verifyFreeCopy().cli)).verifyThread;
    expect(await verdict((check, path) => new RealThread(check, path))).toBe(false);
    expect(await verdict((check, path) => new CopiedThread(check, path))).toBe(true);
  });

  it('a variant whose pattern no longer matches the build fails instead of copying dist unchanged', () => {
    expect(() => variantBuild({ ...VERIFY_FREE, dir: 'dist-novariant', pattern: /\bnoSuchHookAnywhere\b/g })).toThrowError(/found 0 Ed25519 verify calls/);
  });
});
