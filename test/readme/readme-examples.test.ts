/**
 * The README's shell examples, taken from the README itself (so they cannot drift), run in
 * order as a new user would paste them: the first block's node (`npm start`, home ~/.dms) keeps
 * running while every later block runs in bash from the repository.
 *
 * What the README fixes for its reader (REST 9999, libp2p 9000, the ports 91xx/900x and the
 * homes /tmp/dms-a, /tmp/dms-b of its second network) is made this run's own (asRun): two runs on
 * one machine, or a reader's own node, must not meet. The node from npm start takes free ports
 * (DMS_PORT=0) and the blocks are run against the URL it wrote; that 9999 and 9000 are the
 * defaults is checked against the configuration's defaults instead.
 *
 * A block is marked with an HTML comment just above it when it needs something:
 *   <!-- readme-test: first (…) -->   the node is started from it (npm start)
 *   <!-- readme-test: docker -->      it runs Docker jobs: skipped without an engine, as the
 *                                     Docker tests are (required under DMS_REQUIRE_DOCKER=1)
 *   <!-- readme-test: skip (why) -->  not run, for the reason given
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ConfigSchema } from '../../runtime/config.js';
import { dockerForTests, TEST_IMAGE } from '../helpers/docker.js';
import { waitFor } from '../helpers/network.js';
import { otherShellFences, shellBlocks } from './blocks.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const README = readFileSync(join(ROOT, 'README.md'), 'utf8');

const blocks = shellBlocks(README);
const [first, ...rest] = blocks;

/** A home of its own for the README's ~/.dms, and no DMS_* settings from whoever runs the suite. */
const HOME = mkdtempSync(join(tmpdir(), 'dms-readme-'));
const ENV: NodeJS.ProcessEnv = {
  ...Object.fromEntries(Object.entries({ ...process.env, HOME }).filter(([k]) => !k.startsWith('DMS_') || k.startsWith('DMS_REQUIRE_'))),
  // With a HOME of its own npx has no cache, so the README's first `npx dms` installs this
  // checkout into one, which runs its `prepare` (npm run build: dist/ removed and written again)
  // under every other test running from dist/ at that moment. `npm start` still runs its script.
  npm_config_ignore_scripts: 'true',
};
/** This run's /tmp of the README: its second network's homes are made here. */
const TMP = mkdtempSync(join(tmpdir(), 'dms-readme-tmp-'));
const OTHER_HOMES = [join(TMP, 'dms-a'), join(TMP, 'dms-b')];
/** The REST URL of the node from npm start, once it has written it. */
let restUrl = '';

/** A block as this run runs it: the README's fixed ports and /tmp homes made this run's own. */
export function asRun(code: string, url: string, tmp: string): string {
  return code
    .replaceAll('http://127.0.0.1:9999', url)
    .replace(/\/tmp\/dms-([ab])\b/g, `${tmp}/dms-$1`)
    .replace(/--port 9\d{3}\b/g, '--port 0')
    .replace(/\/tcp\/9\d{3}\b/g, '/tcp/0');
}

function bash(code: string, timeoutMs = 120_000): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const proc = spawn('bash', ['-euo', 'pipefail', '-c', code], { cwd: ROOT, env: ENV, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    proc.stdout.on('data', (d) => (stdout += d));
    proc.stderr.on('data', (d) => (stderr += d));
    const timer = setTimeout(() => proc.kill('SIGKILL'), timeoutMs);
    proc.on('exit', (exit) => {
      clearTimeout(timer);
      resolve({ code: exit, stdout, stderr });
    });
  });
}

const { problem: dockerProblem, docker } = await dockerForTests('the README examples that run Docker jobs');

let node: ChildProcess | undefined;
let nodeLog = '';

beforeAll(async () => {
  for (const h of OTHER_HOMES) rmSync(h, { recursive: true, force: true });
  // The README's examples name busybox:latest; no registry is reachable here, so the local
  // busybox test image stands in under that name.
  if (!dockerProblem) await docker.getImage(TEST_IMAGE).tag({ repo: 'busybox', tag: 'latest' });
  expect(first.mark, 'the first sh block is the one that starts the node').toMatch(/^first\b/);
  expect(first.code).toContain('npm install && npm start');
  expect(first.code).toContain('npm test');
  // What the README says npm start listens on is what a node with no settings takes.
  const defaults = ConfigSchema.parse({});
  expect(first.code).toContain('REST on 127.0.0.1:9999');
  expect(`${defaults.rest.addr}:${defaults.rest.port}`).toBe('127.0.0.1:9999');
  expect(defaults.network.ListenAddresses).toEqual(['/ip4/0.0.0.0/tcp/9000']);
  // This run's node takes free ports instead, so another run (or the reader's node) is never met.
  const env = { ...ENV, DMS_PORT: '0', DMS_NETWORK_LISTEN_ADDRESSES: '/ip4/127.0.0.1/tcp/0' };
  node = spawn('npm', ['start'], { cwd: ROOT, env, stdio: ['ignore', 'pipe', 'pipe'], detached: true });
  node.stdout!.on('data', (d) => (nodeLog += d));
  node.stderr!.on('data', (d) => (nodeLog += d));
  // The node answering is the one started here, from the README's home ~/.dms.
  restUrl = await waitFor(
    'the node from npm start to write ~/.dms/node.json and answer there',
    async () => {
      if (node!.exitCode !== null) throw new Error(`npm start exited (${node!.exitCode}): ${nodeLog.slice(-1000)}`);
      const { url } = JSON.parse(readFileSync(join(HOME, '.dms', 'node.json'), 'utf8')) as { url: string };
      return (await fetch(`${url}/health`).then((r) => r.ok, () => false)) && url;
    },
    { timeoutMs: 60_000 },
  );
  expect(restUrl).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
}, 90_000);

afterAll(async () => {
  for (const h of OTHER_HOMES) await bash(`npx dms --home ${h} stop || true`);
  if (node?.pid && node.exitCode === null) {
    const exited = new Promise((r) => node!.once('exit', r));
    process.kill(-node.pid, 'SIGTERM');
    await exited;
  }
  for (const h of [HOME, TMP]) rmSync(h, { recursive: true, force: true });
  // What the First job section writes in the checkout, as a reader's would.
  rmSync(join(ROOT, 'first-job.yaml'), { force: true });
}, 60_000);

describe('the README, run as written', () => {
  it('has shell examples to run, each one marked or runnable', () => {
    expect(rest.length).toBeGreaterThanOrEqual(4);
    for (const b of blocks) if (b.mark) expect(b.mark, `README.md:${b.line}`).toMatch(/^(first|docker|skip \(.+\))/);
    expect(otherShellFences(README, 'README.md'), 'shell examples written in a fence other than ```sh, which this test would not run').toEqual([]);
  });

  for (const block of rest) {
    const title = `README.md:${block.line}: ${block.code.split('\n')[0].slice(0, 70)}`;
    if (block.mark?.startsWith('skip')) {
      it.skip(`${title} (${block.mark})`, () => {});
      continue;
    }
    const needsDocker = block.mark === 'docker';
    it.skipIf(needsDocker && dockerProblem !== null)(title, { timeout: 180_000 }, async () => {
      const code = asRun(block.code, restUrl, TMP);
      const r = await bash(code);
      expect(r.code, `exit code of the block at README.md:${block.line}\nstdout:\n${r.stdout}\nstderr:\n${r.stderr}\nnode log:\n${nodeLog.slice(-2000)}`).toBe(0);
      expect(r.stderr, 'no block fails part-way with a dms error').not.toMatch(/^dms: (?!warning)/m);
      if (block.code.includes('cat > first-job.yaml')) {
        // Written, run, followed (its output), its history read, then hello.yaml and dms run.
        expect(r.stdout).toContain('hello world\ndone after 2 s\n');
        expect(r.stdout).toMatch(/^history\n {2}\S+ +pending +submitted$/m);
        expect(r.stdout).toMatch(/^ {2}\S+ +pending → running +started$/m);
        expect(r.stdout).toMatch(/^ {2}\S+ +running → completed +exited with code 0$/m);
        expect(r.stdout).toMatch(/^resources +0\.5 cores, 64 MiB memory/m);
        expect(r.stdout).toContain('hello world\nhi\n');
      }
      if (block.code.includes('/api/v1/actor/invoke')) {
        expect(r.stdout).toContain('"be":"/private/reply"');
        // Pasted again, it works again: a fresh nonce each time, never "replayed envelope".
        const again = await bash(code);
        expect(again.code, again.stderr).toBe(0);
        expect(again.stdout).toContain('"be":"/private/reply"');
        expect(again.stdout).not.toContain('replayed');
      }
      if (block.code.includes('actor invoke /public/hello')) expect(r.stdout).toContain('did:key:z6Mk');
    });
  }

  it('still has the first node running after every example', async () => {
    expect((await fetch(`${restUrl}/health`)).status).toBe(200);
  });
});
