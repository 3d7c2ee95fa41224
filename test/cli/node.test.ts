import { existsSync, readFileSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { assertBuilt, cleanupHomes, dms, isAlive, prepareHome, readInfo, tempHome } from './helpers.js';

beforeAll(assertBuilt);

describe('dms init', () => {
  afterAll(cleanupHomes);

  it('creates owner-only keys and never replaces them', async () => {
    const home = tempHome('init');
    const first = await dms(home, ['--json', 'init']);
    expect(first.code, first.stderr).toBe(0);
    const made = JSON.parse(first.stdout);
    expect(made.created).toEqual({ node: true, operator: true });
    expect(made.node_did).toMatch(/^did:key:z6Mk/);
    expect(made.operator_did).toMatch(/^did:key:z6Mk/);
    expect(made.node_did).not.toBe(made.operator_did);
    for (const file of ['node.json', 'operator.json']) {
      expect(statSync(join(home, 'keys', file)).mode & 0o777).toBe(0o600);
    }
    const keysBefore = readFileSync(join(home, 'keys', 'operator.json'), 'utf8');

    const second = await dms(home, ['--json', 'init']);
    expect(second.code, second.stderr).toBe(0);
    const kept = JSON.parse(second.stdout);
    expect(kept.created).toEqual({ node: false, operator: false });
    expect(kept.node_did).toBe(made.node_did);
    expect(kept.operator_did).toBe(made.operator_did);
    expect(readFileSync(join(home, 'keys', 'operator.json'), 'utf8')).toBe(keysBefore);
  });

  // Node 20's recursive mkdir retries for ever where mkdir answers ENOENT under a parent that
  // exists: `init`, `start` and a code cache there hung instead of failing.
  it.skipIf(!existsSync('/proc/self'))('a home where no folder can be made (under /proc) is refused at once, naming the folder', async () => {
    const within = <T>(p: Promise<T>, what: string) =>
      Promise.race([p, new Promise<never>((_, reject) => setTimeout(() => reject(new Error(`${what} still running after 15 s`)), 15_000))]);
    for (const command of [['init'], ['start', '--port', '0']]) {
      const r = await within(dms('/proc/dms-no-home', command, { cwd: tmpdir() }), `dms ${command[0]}`);
      expect(r.code, r.stderr).toBe(1);
      expect(r.stderr.trim()).toBe("dms: cannot make the folder '/proc/dms-no-home' (ENOENT)");
    }
    const cacheUnder = await within(dms(tempHome('proc-cache'), ['--version'], { env: { DMS_CODE_CACHE: '/proc/dms-no-cache' } }), 'dms --version');
    expect(cacheUnder.code, cacheUnder.stderr).toBe(0);
  }, 40_000);
});

describe('dms start --detach, status, stop', { timeout: 90_000 }, () => {
  let home: string;

  afterAll(() => {
    // Whatever happened, leave no node behind.
    const info = readInfo(home);
    if (info && isAlive(info.pid)) process.kill(info.pid, 'SIGKILL');
    cleanupHomes();
  });

  it('status fails while no node runs', async () => {
    home = prepareHome('lifecycle');
    const r = await dms(home, ['status']);
    expect(r.code).not.toBe(0);
    expect(r.stderr.trim()).toMatch(/^dms: no node is running from /);
  });

  it('start --detach returns once healthy; status reports it; stop stops it', async () => {
    const started = await dms(home, ['--json', 'start', '--detach', '--port', '0']);
    expect(started.code, started.stderr).toBe(0);
    const info = JSON.parse(started.stdout);
    expect(info.url).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
    // Returned "once healthy": it must answer right away, without polling.
    expect((await fetch(`${info.url}/health`)).status).toBe(200);
    expect(readInfo(home)?.pid).toBe(info.pid);

    const again = await dms(home, ['start', '--detach', '--port', '0']);
    expect(again.code).not.toBe(0);
    expect(again.stderr).toContain('already running');

    const status = await dms(home, ['--json', 'status']);
    expect(status.code, status.stderr).toBe(0);
    expect(JSON.parse(status.stdout)).toMatchObject({ running: true, healthy: true, pid: info.pid, did: info.did });
    const statusText = await dms(home, ['status']);
    expect(statusText.stdout).toContain('running, healthy');

    const stopped = await dms(home, ['stop']);
    expect(stopped.code, stopped.stderr).toBe(0);
    expect(stopped.stdout).toContain(`node stopped (pid ${info.pid})`);
    expect(isAlive(info.pid)).toBe(false);
    expect(readInfo(home)).toBeUndefined();

    const after = await dms(home, ['stop']);
    expect(after.code).not.toBe(0);
    expect(after.stderr).toMatch(/^dms: no node is running/);
  });
});
