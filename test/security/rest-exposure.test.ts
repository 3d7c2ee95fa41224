import { spawn } from 'node:child_process';
import { tmpdir } from 'node:os';
import { describe, expect, it } from 'vitest';
import { CLI, removeHome, TEST_ENV, tempHome } from '../helpers/node.js';
import { raw } from '../helpers/raw-http.js';
import { nodeStarter } from '../helpers/started.js';

/**
 * REST exposure (rest-hardening's row 10), against real node processes: what is proven here is
 * an exit code and what the node says on stderr.
 */

const start = nodeStarter({ network: { enabled: false } });

/** Runs `dms start` expecting it to exit; a node that serves instead is killed after 15 s (and the test fails). */
function startExpectingExit(args: string[]): Promise<{ code: number | null; stderr: string }> {
  return new Promise((resolve) => {
    const proc = spawn(process.execPath, [CLI, ...args], { env: { ...process.env, ...TEST_ENV }, stdio: ['ignore', 'ignore', 'pipe'], cwd: tmpdir() });
    let stderr = '';
    proc.stderr.on('data', (d) => (stderr += d));
    const timer = setTimeout(() => proc.kill('SIGKILL'), 15_000);
    proc.on('exit', (code) => {
      clearTimeout(timer);
      resolve({ code, stderr });
    });
  });
}

describe('exposure (10)', () => {
  const FIX = 'turn on API keys (DMS_API_KEY_ENABLED=true) or JWT (DMS_JWT_SECRET), or set rest.insecure: true to accept the risk';

  it('refuses to serve REST on a non-loopback address without credentials, naming the fix', async () => {
    const home = tempHome();
    const r = await startExpectingExit(['--home', home, 'start', '--port', '0', '--host', '0.0.0.0']);
    removeHome(home);
    expect(r.code).not.toBe(0);
    expect(r.code).not.toBeNull();
    expect(r.stderr).toContain(FIX);
    expect(r.stderr.trim().split('\n').filter((l) => l.includes(FIX))).toHaveLength(1);
  });

  it('starts with rest.insecure: true (still warning), or with credentials', async () => {
    const insecure = await start({ env: { DMS_HOST: '0.0.0.0' }, config: { rest: { insecure: true } } });
    expect(insecure.logs()).toMatch(/non-loopback address without authentication/);
    const authed = await start({ env: { DMS_HOST: '0.0.0.0', DMS_JWT_SECRET: 'a-jwt-secret-for-tests-that-is-long-enough-0123456789' } });
    expect((await raw(`${authed.url.replace('0.0.0.0', '127.0.0.1')}/health`)).status).toBe(200);
  });
});
