/**
 * The examples' READMEs (examples/**\/README.md) run as written, as the main README's are
 * (readme-examples.test.ts): every ```sh block against a node loaded with the plugins their
 * ```json blocks name (`/path/to/` being this checkout), its REST address made this run's own.
 * A block must exit 0 and no answer in it may be a refusal (an answer that is `{"error": …}`).
 */
import { spawn } from 'node:child_process';
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type NodeProcess, removeHome, startNode } from '../helpers/node.js';
import { otherShellFences, shellBlocks } from './blocks.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));

function readmes(dir: string): string[] {
  return readdirSync(dir).flatMap((f) => {
    const path = join(dir, f);
    if (statSync(path).isDirectory()) return readmes(path);
    return f === 'README.md' ? [path] : [];
  });
}

const FILES = readmes(join(ROOT, 'examples')).map((path) => ({ path, name: relative(ROOT, path), text: readFileSync(path, 'utf8') }));

/** The plugin modules the examples' ```json blocks load, at this checkout. */
const modules = FILES.flatMap(({ text }) => [...text.matchAll(/"\/path\/to\/([^"]+\.mjs)"/g)].map((m) => join(ROOT, m[1])));

let node: NodeProcess;
beforeAll(async () => {
  node = await startNode({ timeoutMs: 45_000, config: { network: { enabled: false }, general: { log_level: 'warn' }, plugins: { modules } } });
}, 60_000);
afterAll(async () => {
  await node?.stop();
  if (node) removeHome(node.home);
});

function bash(code: string): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const proc = spawn('bash', ['-euo', 'pipefail', '-c', code], { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    proc.stdout.on('data', (d) => (stdout += d));
    proc.stderr.on('data', (d) => (stderr += d));
    const timer = setTimeout(() => proc.kill('SIGKILL'), 30_000);
    proc.on('exit', (exit) => {
      clearTimeout(timer);
      resolve({ code: exit, stdout, stderr });
    });
  });
}

describe("the examples' READMEs, run as written", () => {
  it('are found, load plugins, and write every command example as a ```sh block', () => {
    expect(FILES.map((f) => f.name)).toEqual(expect.arrayContaining(['examples/plugins/echo/README.md', 'examples/plugins/greeter/README.md']));
    expect(modules.length).toBeGreaterThanOrEqual(2);
    for (const f of FILES) expect(otherShellFences(f.text, f.name)).toEqual([]);
  });

  for (const file of FILES) {
    for (const block of shellBlocks(file.text)) {
      it(`${file.name}:${block.line}: ${block.code.split('\n')[0].slice(0, 70)}`, { timeout: 60_000 }, async () => {
        const { host } = new URL(node.url);
        const r = await bash(block.code.replace(/\b(localhost|127\.0\.0\.1):9999\b/g, host));
        expect(r.code, `stdout:\n${r.stdout}\nstderr:\n${r.stderr}`).toBe(0);
        expect(r.stdout, 'an answer in the block is a refusal').not.toMatch(/^\s*\{\s*"error"\s*:/m);
      });
    }
  }
});
