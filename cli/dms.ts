/**
 * What dist/lib/dms.cjs holds (scripts/bundle.mjs): the whole program as one CommonJS script, so
 * that V8 can start it from a code cache (runtime/code-cache.ts). The daemon is in it too, and is
 * run only by `dms start` (cli/commands/lifecycle.ts imports it when starting).
 */
export { runCli } from './run.js';
/** `dms/plugin`: dist/behaviors/plugin.js hands plugins these, the very modules the node checks them with. */
export * as plugin from '../behaviors/plugin.js';
/** For test/storage/compiled.test.ts: storage opened, migrated and written from the built JavaScript. */
export * as storage from '../storage/index.js';
/** For bench/lib/variant-build.ts's check (test/unit/bench-variants.test.ts) of the verify-free copy: its checks inline and on the thread. */
export * as ed25519 from '../runtime/crypto/ed25519.js';
export * as verifyThread from '../runtime/crypto/verify-thread.js';
