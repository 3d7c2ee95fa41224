/**
 * The JavaScript of dist/: the node's entry points bundled with esbuild (tsc checks the types and
 * writes the .d.ts files). Start-up was module loading: ~2,400 files resolved, read and compiled
 * one by one before a node did anything; bundled, the ES modules are tree-shaken and read at once.
 *
 * One build with code splitting, so the entry points share their modules through chunks: a
 * plugin's `dms/plugin` (dist/behaviors/plugin.js) is the same module instance as the kernel
 * that checks it (definePlugin, zod, DmsError), and the daemon is loaded by `dms start` only.
 * Every entry point and chunk sits one folder below dist/, as the sources sit one below the
 * root, so the few paths resolved from import.meta.url (`../package.json`, `../daemon/…`) hold.
 *
 * Left as packages, loaded from node_modules as before: the native SQLite driver and the ORM
 * that loads its drivers and dialects by name, pino (its transports run in worker threads that
 * load modules by name), and dockerode (CommonJS with optional native parts, loaded on first use).
 */
import { build } from 'esbuild';

const entryPoints = [
  'cli/main.ts',
  'daemon/node.ts',
  // Registered by URL as a module hook (daemon/plugins.ts).
  'daemon/plugin-api-resolve.ts',
  // `dms/plugin` (package.json exports).
  'behaviors/plugin.ts',
  // test/storage/compiled.test.ts opens the database from the built JavaScript, and
  // test/unit/bench-variants.test.ts checks a bench copy's signature checks through this module.
  'storage/index.ts',
  'runtime/crypto/keys.ts',
];

const external = ['sqlite3', '@mikro-orm/*', 'knex', 'pino', 'pino-pretty', 'thread-stream', 'dockerode', 'ssh2', 'cpu-features'];

await build({
  entryPoints,
  outdir: 'dist',
  outbase: '.',
  bundle: true,
  splitting: true,
  chunkNames: 'chunks/[name]-[hash]',
  format: 'esm',
  platform: 'node',
  target: 'node20',
  sourcemap: true,
  external,
  // CommonJS packages bundled into ES modules still call require (for Node's own modules).
  banner: { js: "import { createRequire as __dmsCreateRequire } from 'node:module'; const require = __dmsCreateRequire(import.meta.url);" },
  logLevel: 'warning',
});
