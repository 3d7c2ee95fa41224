// A plugin that cannot be loaded, is not a plugin, takes a name already taken or fails to start
// stops start-up: the node exits non-zero with one line naming the plugin and the problem, and
// what had started is stopped (no runtime file is left).
import { existsSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { removeHome, runCli, tempHome } from '../helpers/node.js';

const fixture = (name: string) => fileURLToPath(new URL(`../fixtures/plugins/${name}`, import.meta.url));
/** A module whose default export is `def`, made with definePlugin. */
const defined = (def: string) => `import { definePlugin } from 'dms/plugin';\nexport default definePlugin(${def});`;
const example = (name: string) => fileURLToPath(new URL(`../../examples/plugins/${name}/index.mjs`, import.meta.url));

/** Starts a node with `modules` (after writing `files` to its home) and returns how it failed. */
async function failedStart(modules: string[], files: Record<string, string> = {}, plugins: Record<string, unknown> = {}) {
  const home = tempHome();
  try {
    for (const [name, text] of Object.entries(files)) writeFileSync(join(home, name), text);
    writeFileSync(join(home, 'dms_config.json'), JSON.stringify({ plugins: { modules, ...plugins }, network: { enabled: false } }));
    // A node that never gives up on a plugin would never exit: stopped here, well within the test's time.
    const r = await runCli(['--home', home, 'start', '--port', '0', '--log-level', 'warn'], {}, undefined, 20_000);
    return { ...r, lines: r.stderr.trim().split('\n'), runtimeLeft: existsSync(join(home, 'node.json')) };
  } finally {
    removeHome(home);
  }
}

describe('a broken plugin stops start-up naming it', { timeout: 60_000 }, () => {
  it.each([
    ['a module that does not exist', ['./missing.mjs'], {}, /plugins.modules: cannot load '.\/missing.mjs'/],
    ['a module that throws on import', ['./throws.mjs'], { 'throws.mjs': 'throw new Error("boom at import")' }, /cannot load '.\/throws.mjs' \(boom at import\)/],
    ['no default export', ['./none.mjs'], { 'none.mjs': 'export const x = 1' }, /'.\/none.mjs' is not a DMS plugin/],
    ['a behavior without a handler', ['./nohandle.mjs'], { 'nohandle.mjs': 'export default { name: "p", behaviors: [{ name: "/p/x" }] }' }, /'.\/nohandle.mjs' is not a DMS plugin: behaviors.0.handle: handle must be a function/],
    ['nothing to add', ['./empty.mjs'], { 'empty.mjs': 'export default { name: "p", behaviors: [] }' }, /is not a DMS plugin: a plugin needs at least one behavior, executor or route/],
    ['the inbox of a built-in actor', ['./orch.mjs'], { 'orch.mjs': defined('{ name: "orchestrator", behaviors: [{ name: "/x", handle() {} }] }') }, /'.\/orch.mjs' uses the name 'orchestrator', already taken by the built-in actor/],
    ['the name of another plugin', [example('greeter'), './greeter2.mjs'], { 'greeter2.mjs': defined('{ name: "greeter", behaviors: [{ name: "/x", handle() {} }] }') }, /'.\/greeter2.mjs' uses the name 'greeter', already taken by '.*greeter\/index.mjs'/],
    ['the first plugin shape, a bare object', ['./bare.mjs'], { 'bare.mjs': 'export default { name: "p", behaviors: [{ name: "/p/x", handle() {} }] }' }, /'.\/bare.mjs' is not a DMS plugin: make its default export with definePlugin from 'dms\/plugin'/],
    ['too many topics', ['./topics.mjs'], { 'topics.mjs': defined(`{ name: "p", behaviors: [{ name: "/p/x", handle() {} }], topics: ${JSON.stringify(Array.from({ length: 9 }, (_, i) => `/p/${i}`))} }`) }, /'.\/topics.mjs' is not a DMS plugin: topics: a plugin subscribes to at most 8 topics/],
    ['a topic too long', ['./long.mjs'], { 'long.mjs': defined(`{ name: "p", behaviors: [{ name: "/p/x", handle() {} }], topics: ["/${'t'.repeat(256)}"] }`) }, /'.\/long.mjs' is not a DMS plugin: topics.0: a topic is at most 256 characters/],
    ['more topics together than a node may have', ['./t1.mjs', './t2.mjs', './t3.mjs'], Object.fromEntries([1, 2, 3].map((n) => [`t${n}.mjs`, defined(`{ name: "p${n}", behaviors: [{ name: "/p/x", handle() {} }], topics: ${JSON.stringify(Array.from({ length: 6 }, (_, i) => `/p${n}/${i}`))} }`)])), /'.\/t3.mjs' takes the node's plugins past 16 topics together/],
    ['a built-in executor name', [fixture('takes-null.mjs')], {}, /takes-null.mjs' declares the executor 'null', already taken by a built-in executor/],
    ['one route twice', [fixture('twice-routed.mjs')], {}, /twice-routed.mjs' declares the route 'GET \/x' twice/],
    ['an executor that is not one', [fixture('half-executor.mjs')], {}, /half-executor.mjs' \(plugin half\): executor 'half' lacks wait, readLogs, waitForLogs, cancel, cleanup, reconcile\n/],
    ['a start hook that throws', [fixture('broken-start.mjs')], {}, /broken-start.mjs' \(plugin broken\) failed to start: cannot reach its database/],
  ])('%s', async (_what, modules, files, pattern) => {
    const r = await failedStart(modules, files as Record<string, string>);
    expect(r.code, r.stderr).not.toBe(0);
    expect(r.stderr).toMatch(pattern);
    expect(r.lines, r.stderr).toHaveLength(1);
    expect(r.runtimeLeft).toBe(false);
  });
});

describe('a plugin that never finishes loading or starting stops start-up naming it', { timeout: 60_000 }, () => {
  it.each([
    ['a module whose import never settles', ['./hangs.mjs'], { 'hangs.mjs': 'await new Promise(() => {});\nexport default {};' }, /plugins.modules: '.\/hangs.mjs' did not load within 2 s \(plugins.load_timeout_s\)/],
    ['a start hook that never settles', [fixture('never-starts.mjs')], {}, /never-starts.mjs' \(plugin stuck\) did not start within 2 s \(plugins.load_timeout_s\)/],
  ])('%s', async (_what, modules, files, pattern) => {
    const r = await failedStart(modules, files as Record<string, string>, { load_timeout_s: 2 });
    expect(r.code, r.stderr).not.toBe(null);
    expect(r.code, r.stderr).not.toBe(0);
    expect(r.stderr).toMatch(pattern);
    expect(r.lines, r.stderr).toHaveLength(1);
    expect(r.runtimeLeft).toBe(false);
  });
});
