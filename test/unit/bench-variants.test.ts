import { readdirSync, readFileSync } from 'node:fs';
import { pathToFileURL } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { STREAM_FREE, type Variant, type VariantSpec, VERIFY_FREE, variantBuild } from '../../bench/lib/variant-build.js';
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
const copyFile = (v: Variant, path: string) => new URL(`../${path}`, pathToFileURL(v.cli));
const allJs = (v: Variant) =>
  readdirSync(new URL('..', pathToFileURL(v.cli)), { recursive: true, encoding: 'utf8' })
    .filter((f) => f.endsWith('.js'))
    .map((f) => readFileSync(new URL(`../${f}`, pathToFileURL(v.cli)), 'utf8'))
    .join('\n');

describe('bench variant builds', () => {
  it('the stream-free copy finds every dev stream hook of the kernel and compiles each out', () => {
    const v = build(STREAM_FREE);
    expect(v.hits).toBeGreaterThanOrEqual(STREAM_FREE.min);
    // The build is bundled (scripts/bundle.mjs): the kernel's code is somewhere in its files.
    const code = allJs(v);
    expect(code).not.toMatch(/\bthis\.watched\b/);
    expect(code).not.toMatch(/\bthis\.system\.watched\b/);
    // The getter itself stays: only the places that ask are replaced.
    expect(code).toMatch(/get watched\(\)/);
  });

  it('the verify-free copy accepts a forged signature, sync and async, where the real build refuses it', async () => {
    const v = build(VERIFY_FREE);
    expect(v.hits).toBe(2);
    const real = await import('../../runtime/crypto/keys.js');
    const copy = (await import(copyFile(v, 'runtime/crypto/keys.js').href)) as typeof real;
    const key = KeyPair.generate();
    const data = Buffer.from('dms:msg:{}');
    const forged = new Uint8Array(64).fill(7);
    const publicKey = real.publicKeyObject(key.publicKey);
    expect(real.verifySync(publicKey, data, forged)).toBe(false);
    expect(await real.verifyAsync(publicKey, data, forged)).toBe(false);
    expect(copy.verifySync(publicKey, data, forged)).toBe(true);
    expect(await copy.verifyAsync(publicKey, data, forged)).toBe(true);
  });

  it('a variant whose pattern no longer matches the build fails instead of copying dist unchanged', () => {
    expect(() => variantBuild({ ...STREAM_FREE, dir: 'dist-novariant', pattern: /\bnoSuchHookAnywhere\b/g })).toThrowError(/found 0 dev stream hooks/);
  });
});
