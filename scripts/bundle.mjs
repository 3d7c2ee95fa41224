/**
 * The JavaScript of dist/: the node bundled with esbuild (tsc writes the .d.ts files of
 * `dms/plugin`, the one typed export; `npm test` checks every file's types). Start-up was module
 * loading: ~2,400 files resolved, read and compiled one by one before a node did anything.
 *
 * The whole program is one CommonJS script, dist/lib/dms.cjs (cli/dms.ts), written as one
 * function expression of `(exports, require, module, __filename, __dirname)` so that
 * runtime/code-cache.ts can run it through `vm.Script` with V8's code cache: Node 20 has no
 * compile cache for ES modules, and compiling 6 MB of JavaScript was about 0.4 s of every start.
 * One script also means one instance of every module: a plugin's `dms/plugin`
 * (dist/behaviors/plugin.js, written below from the names the plugin API exports) hands it the
 * very definePlugin, zod and DmsError the node checks it with. The daemon's modules are in the
 * script but run only when `dms start` imports them. Around it, three small ES modules: the
 * `dms` command (dist/cli/main.js, cli/bin.ts), the loader (dist/lib/code-cache.js, for the
 * plugin API's module) and the module hook that resolves `dms/plugin` (daemon/plugins.ts).
 * Everything sits one folder below dist/, as the sources sit one below the root, so the few paths
 * resolved from import.meta.url (`../package.json`, `../daemon/…`) hold.
 *
 * MikroORM and knex are bundled too: loaded from node_modules they were ~700 CommonJS files
 * (lodash alone 258) resolved, read and compiled one by one, 0.5 s of a 1.9 s warm start's CPU
 * in the profile and about 15 MB of an idle node (issue 25). Two things of theirs need help
 * (below): the core reads its version from its package.json by a relative path, and knex names
 * every database driver.
 *
 * dockerode is bundled so that what it requires eagerly but DMS never uses is required only when
 * used (lazyRequires below): every node talks to the engine at start (recovery's reconcile, the
 * OOM event stream), and dockerode's top-level requires of ssh2 (a `DOCKER_HOST=ssh://` engine)
 * and of gRPC with its protobuf loader (BuildKit sessions, for image builds) were about 20 MB of
 * an idle node's 140 MB RSS and a fifth of its start-up, measured (issue 25).
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { build } from 'esbuild';

/**
 * Files of bundled packages that DMS needs rarely or never, left to Node to require from
 * node_modules when first asked for (they read their `.proto` files by __dirname, so they stay
 * where they are). A file required at the top of its importer (`wrap`) is replaced by a function
 * that requires it when first called; buildkit is already required inside the one method using it.
 */
const LAZY_REQUIRES = [
  // The client for a `DOCKER_HOST=ssh://` engine: ssh2 and its crypto.
  { importer: /docker-modem[\\/]lib[\\/]modem\.js$/, request: './ssh', file: 'docker-modem/lib/ssh.js', wrap: true },
  // BuildKit sessions (gRPC and its protobuf loader), for image builds with credentials.
  { importer: /dockerode[\\/]lib[\\/]docker\.js$/, request: './session', file: 'dockerode/lib/session.js', wrap: true },
  { importer: /dockerode[\\/]lib[\\/]docker\.js$/, request: './buildkit', file: 'dockerode/lib/buildkit.js', wrap: false },
];

const lazyRequires = {
  name: 'lazy-requires',
  setup(b) {
    b.onResolve({ filter: /^\.\/(ssh|session|buildkit)$/ }, (args) => {
      const lazy = LAZY_REQUIRES.find((l) => l.request === args.path && l.importer.test(args.importer));
      if (!lazy) return undefined;
      return lazy.wrap ? { path: lazy.file, namespace: 'lazy-require' } : { path: lazy.file, external: true };
    });
    b.onResolve({ filter: /.*/, namespace: 'lazy-require' }, (args) => ({ path: args.path, external: true }));
    b.onLoad({ filter: /.*/, namespace: 'lazy-require' }, (args) => ({
      contents: `module.exports = function () { return require(${JSON.stringify(args.path)}).apply(this, arguments); };`,
      loader: 'js',
    }));
  },
};

/** MikroORM's core reads `../../package.json` (or `../package.json`) from utils/Utils.js for its version: its own. */
const ormVersion = {
  name: 'orm-version',
  setup(b) {
    b.onResolve({ filter: /^\.\.\/(\.\.\/)?package\.json$/ }, async (args) =>
      /@mikro-orm[\\/]core[\\/]utils[\\/]Utils\.js$/.test(args.importer) ? { path: (await import('node:path')).join(args.resolveDir, '..', 'package.json') } : undefined,
    );
  },
};

/**
 * umzug (the migrator's runner) requires its command-line interface at its top, and with it
 * @rushstack/ts-command-line, ajv and argparse: ~400 KB of a cold start's compile, for a CLI
 * DMS never runs (it migrates through the API). In the bundle, `./cli` is a module whose class
 * says so if anything ever constructs it.
 */
const noUmzugCli = {
  name: 'no-umzug-cli',
  setup(b) {
    b.onResolve({ filter: /^\.\/cli$/ }, (args) => (/umzug[\\/]lib[\\/](umzug|index)\.js$/.test(args.importer) ? { path: 'umzug-cli', namespace: 'no-umzug-cli' } : undefined));
    b.onLoad({ filter: /.*/, namespace: 'no-umzug-cli' }, () => ({
      contents: "exports.UmzugCLI = class UmzugCLI { constructor() { throw new Error('umzug\\'s command line is not part of the DMS bundle'); } };",
      loader: 'js',
    }));
  },
};

/**
 * Left to Node, from node_modules: the native SQLite driver; pino-pretty, required only for pretty
 * logs; ssh2 and gRPC (LAZY_REQUIRES). pino itself is bundled: its transports (worker threads
 * that load modules by path) would not survive that, but DMS runs none (runtime/log.ts writes
 * to stderr, pretty lines through pino-pretty in the node's own thread); loaded from
 * node_modules it was ~20 files resolved and compiled at every start. knex names every database
 * driver it has a dialect for; none but sqlite3 is installed, and only the SQLite dialect runs.
 * The native modules (sqlite3, sodium-native) load their binaries from beside their own files.
 */
const DRIVERS = ['pg', 'pg-query-stream', 'mysql', 'mysql2', 'oracledb', 'tedious', 'better-sqlite3', 'libsql', 'mariadb', 'mariadb/*'];
const external = ['sqlite3', 'sodium-native', 'pino-pretty', 'ssh2', 'cpu-features', '@grpc/*', 'protobufjs', ...DRIVERS];

const common = {
  bundle: true,
  platform: 'node',
  target: 'node20',
  sourcemap: true,
  // Without comments and indentation the node reads, scans and holds about a third less source.
  // Stack traces point into long lines; `node --enable-source-maps` maps them back to the sources.
  minifyWhitespace: true,
  logLevel: 'warning',
  metafile: true,
};

const program = await build({
  ...common,
  entryPoints: { 'lib/dms': 'cli/dms.ts' },
  outdir: 'dist',
  outExtension: { '.js': '.cjs' },
  format: 'cjs',
  external,
  plugins: [lazyRequires, ormVersion, noUmzugCli],
  // The function runtime/code-cache.ts calls, as Node's CommonJS loader would wrap the file,
  // strict as the ES modules it is made of.
  // import.meta has no CommonJS form: its url is the bundle's own.
  banner: { js: "(function (exports, require, module, __filename, __dirname) { 'use strict'; const __dmsImportMetaUrl = require('node:url').pathToFileURL(__filename).href;" },
  footer: { js: '})' },
  define: { 'import.meta.url': '__dmsImportMetaUrl' },
});

const modules = await build({
  ...common,
  entryPoints: {
    'cli/main': 'cli/bin.ts',
    'lib/code-cache': 'runtime/code-cache.ts',
    // Registered by URL as a module hook (daemon/plugins.ts).
    'daemon/plugin-api-resolve': 'daemon/plugin-api-resolve.ts',
  },
  outdir: 'dist',
  format: 'esm',
});

/**
 * `dms/plugin` (package.json exports): an ES module exporting, by name, what the program's plugin
 * API exports. The names are esbuild's, from the API's sources, so they are those of the .d.ts.
 */
const api = await build({ ...common, entryPoints: ['behaviors/plugin.ts'], outdir: 'dist/api-names', format: 'esm', write: false, sourcemap: false, external: ['*'] });
const names = Object.values(api.metafile.outputs).find((o) => o.entryPoint)?.exports ?? [];
if (!names.includes('definePlugin')) throw new Error(`the plugin API exports no definePlugin (found: ${names.join(', ')})`);
writeFileSync(
  'dist/behaviors/plugin.js',
  [
    '// dms/plugin: the plugin API of the program in ../lib/dms.cjs, the same modules the node checks plugins with (scripts/bundle.mjs).',
    "import { fileURLToPath } from 'node:url';",
    "import { loadBundle } from '../lib/code-cache.js';",
    "const api = loadBundle(fileURLToPath(new URL('../lib/dms.cjs', import.meta.url))).plugin;",
    `export const { ${names.join(', ')} } = api;`,
    '',
  ].join('\n'),
);

const result = { metafile: { outputs: { ...program.metafile.outputs, ...modules.metafile.outputs } } };

/**
 * V8 holds a source text with one character above U+00FF as two bytes a character: one such
 * character left in a regular expression (esbuild escapes them in strings and names, not in
 * regex literals) doubled the memory of a 480 KB entry point. `\uXXXX` means the same there
 * and in strings, so every one is written so.
 */
for (const file of Object.keys(result.metafile.outputs).filter((f) => /\.c?js$/.test(f))) {
  const text = readFileSync(file, 'utf8');
  if (/[^\x00-\x7f]/.test(text)) writeFileSync(file, text.replace(/[^\x00-\x7f]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`));
}
