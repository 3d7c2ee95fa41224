/**
 * How far V8 may grow its young generation while the program starts (issue 25's idle RSS).
 *
 * V8 doubles the young generation (two semi-spaces of 1 MB each at first, up to 16 MB each on
 * 64-bit Node 20) after a scavenge in which most of it survived. Start-up is exactly that: the
 * program's modules, schemas and components are made once and kept. So a node came out of
 * start-up with 16 MB of young generation holding about 1 MB, and kept it until V8's memory
 * reducer ran, which happens only after a full collection that an idle node may not make for
 * minutes (measured: 16 s after start in one run, not within 30 s in five others; 106–108 MB of
 * RSS at 10 s, 93 MB after).
 *
 * So the program starts with the growth factor at 1 (the young generation stays at its first
 * size; start-up's survivors go to the old generation, where they belong), and a node restores
 * V8's default as soon as it serves, so work that makes short-lived garbage fast (thousands of
 * jobs a second) grows it as before.
 *
 * V8 hashes its flags into every code cache and refuses a cache made under other flags, so the
 * program's loader (runtime/code-cache.ts, the first thing every process runs) sets the factor
 * before it compiles the bundle, and makes every cache under it too (`withStartFlags`): every
 * cache is made and read at 1. A worker thread's start (the plugin loader's resolve hook runs in
 * one) puts V8's flags back to the command line's, which ends the hold early in a node with plugins.
 */
import { setFlagsFromString } from 'node:v8';

/** V8's own growth factor (`node --v8-options`: `--semi-space-growth-factor`, default 2). */
const V8_DEFAULT = 2;

/**
 * Whether this process has released the hold, kept on the global object: the loader and the
 * program are bundled apart (scripts/bundle.mjs), each with its own copy of this module.
 */
const STATE = Symbol.for('dms.young-generation');
const state = ((globalThis as Record<symbol, unknown>)[STATE] ??= { released: false }) as { released: boolean };

const growthFactor = (factor: number) => setFlagsFromString(`--semi-space-growth-factor=${factor}`);

/** Keeps the young generation at its first size (the loader calls it before the program runs). */
export function holdYoungGeneration(): void {
  growthFactor(1);
}

/** Lets V8 grow the young generation again, as it would by default: a node that serves. */
export function releaseYoungGeneration(): void {
  state.released = true;
  growthFactor(V8_DEFAULT);
}

/** Runs `make` under the flags the program was compiled under (a code cache), then puts back this process's. */
export function withStartFlags<T>(make: () => T): T {
  growthFactor(1);
  try {
    return make();
  } finally {
    if (state.released) growthFactor(V8_DEFAULT);
  }
}
