// Without a Docker engine the Docker tests skip; the run's last lines must say so, with the
// reason, instead of a bare pass line. Runs vitest itself on the Docker test files, pointed
// at an engine that does not exist.
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { expect, it } from 'vitest';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const VITEST = fileURLToPath(new URL('../../node_modules/vitest/vitest.mjs', import.meta.url));
const FILES = ['test/executors/docker.test.ts', 'test/jobs/docker.test.ts'];

function vitest(env: Record<string, string>): Promise<{ code: number | null; stdout: string }> {
  const clean: NodeJS.ProcessEnv = {};
  // The inner run must not believe it is a worker of this one.
  for (const [k, v] of Object.entries(process.env)) if (!/^(VITEST|DMS_REQUIRE_DOCKER|DOCKER_)/.test(k)) clean[k] = v;
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [VITEST, 'run', ...FILES], { cwd: ROOT, env: { ...clean, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    child.stdout.on('data', (d) => (stdout += d));
    child.stderr.resume();
    child.on('exit', (code) => resolve({ code, stdout }));
  });
}

it('says how many Docker tests were skipped, and why', { timeout: 120_000 }, async () => {
  const r = await vitest({ DOCKER_HOST: 'unix:///nonexistent/docker.sock' });
  expect(r.code, r.stdout).toBe(0);
  const summary = /Tests: \d+ passed, 0 failed, (\d+) skipped\n/.exec(r.stdout);
  expect(summary, r.stdout).not.toBeNull();
  const skipped = Number(summary![1]);
  expect(skipped).toBeGreaterThan(0);
  const lines = r.stdout.slice(summary!.index).split('\n');
  expect(lines[1]).toMatch(new RegExp(`^Docker: ${skipped} tests skipped \\(no Docker engine answers \\(.+\\); set DMS_REQUIRE_DOCKER=1 to make that a failure\\)$`));
  expect(lines[2]).toMatch(/^ {2}Docker executor tests: \S.*$/);
  expect(lines[3]).toMatch(/^ {2}Docker job tests: \S.*$/);
});

it('keeps failing the run under DMS_REQUIRE_DOCKER=1', { timeout: 120_000 }, async () => {
  const r = await vitest({ DOCKER_HOST: 'unix:///nonexistent/docker.sock', DMS_REQUIRE_DOCKER: '1' });
  expect(r.code).not.toBe(0);
  expect(r.stdout).toMatch(/Tests: \d+ passed, 2 failed, \d+ skipped\n/);
  expect(r.stdout).not.toMatch(/^Docker: /m);
});
