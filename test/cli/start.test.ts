import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { listenAddr, waitFor } from '../helpers/network.js';
import { type NodeProcess, removeHome, startNode } from '../helpers/node.js';
import { assertBuilt, CLI, cleanEnv, cleanupHomes, dms, freePort, prepareHome, readInfo, tempHome } from './helpers.js';

beforeAll(assertBuilt);
afterAll(cleanupHomes);

/** A home whose node runs the network on loopback (port chosen per test), quietly. */
function networkHome(label: string): string {
  const home = tempHome(label);
  const config = { general: { log_level: 'warn' }, network: { ListenAddresses: ['/ip4/127.0.0.1/tcp/0'] } };
  writeFileSync(join(home, 'dms_config.json'), JSON.stringify(config));
  return home;
}

/** The libp2p TCP port of a multiaddr such as /ip4/127.0.0.1/tcp/41234/p2p/12D3… */
const tcpPort = (addr: string): number => Number(/\/tcp\/(\d+)/.exec(addr)![1]);

describe('dms start: libp2p listen addresses (--listen, and a clear error when taken)', { timeout: 90_000 }, () => {
  let first: NodeProcess;
  let taken: string;

  beforeAll(async () => {
    first = await startNode();
    taken = `/ip4/127.0.0.1/tcp/${tcpPort(listenAddr(first))}`;
  });
  afterAll(async () => {
    await first?.stop();
    if (first) removeHome(first.home);
  });

  const expected = (addr: string) =>
    new RegExp(
      `^dms: network\\.ListenAddresses: cannot listen on ${addr.replace(/[./]/g, '\\$&')} \\(address in use\\); ` +
        `pick another with DMS_NETWORK_LISTEN_ADDRESSES=\\S+/tcp/0 or --listen\\n$`,
    );

  it('a second node on the first one\'s port (--listen) exits non-zero with one line naming the setting and the address', async () => {
    const r = await dms(networkHome('listen-flag'), ['start', '--port', '0', '--listen', taken]);
    expect(r.code).not.toBe(0);
    expect(r.stderr).toMatch(expected(taken));
    expect(r.stderr).not.toMatch(/faultTolerance|\n\s+at /);
  });

  it('the same through DMS_NETWORK_LISTEN_ADDRESSES, and with several addresses only the failing one is named', async () => {
    const other = `/ip4/127.0.0.1/tcp/${await freePort()}`;
    const r = await dms(networkHome('listen-env'), ['start', '--port', '0'], { env: { DMS_NETWORK_LISTEN_ADDRESSES: `${other},${taken}` } });
    expect(r.code).not.toBe(0);
    expect(r.stderr).toMatch(expected(taken));
    expect(r.stderr).not.toContain(other);
  });

  it('--listen sets the libp2p addresses (over the environment), comma-separated', async () => {
    const port = await freePort();
    const node = await startNode({ args: ['--listen', `/ip4/127.0.0.1/tcp/${port}`] });
    try {
      expect(tcpPort(listenAddr(node))).toBe(port);
    } finally {
      await node.stop();
      removeHome(node.home);
    }
    const bad = await dms(networkHome('listen-bad'), ['start', '--port', '0', '--listen', 'nonsense']);
    expect(bad.code).not.toBe(0);
    expect(bad.stderr).toMatch(/^dms: .*'nonsense' is not a multiaddr/);
  });
});

describe('dms start --detach: a failure shows only this run\'s log lines', { timeout: 90_000 }, () => {
  // A failure only the started node meets (a busy REST port is refused before anything starts,
  // so it leaves no log): a TLS certificate file that is not there, named differently each run.
  const missingCert = (n: string) => ({ DMS_TLS_ENABLED: 'true', DMS_TLS_CERT_FILE: `/nonexistent/cert-${n}.pem`, DMS_TLS_KEY_FILE: `/nonexistent/key-${n}.pem` });

  it('the second failing start prints its own error, not the first one\'s', async () => {
    const home = prepareHome('detach-logs');
    const [p1, p2] = ['first-run', 'second-run'];
    const one = await dms(home, ['start', '--detach', '--port', '0'], { env: missingCert(p1) });
    expect(one.code).not.toBe(0);
    expect(one.stderr).toContain(p1);

    const two = await dms(home, ['start', '--detach', '--port', '0'], { env: missingCert(p2) });
    expect(two.code).not.toBe(0);
    expect(two.stderr).toContain(p2);
    expect(two.stderr).not.toContain(p1);
    // The log file keeps both runs: only what is shown is limited to this one.
    const log = readFileSync(join(home, 'logs', 'node.log'), 'utf8');
    expect(log).toContain(p1);
    expect(log).toContain(p2);
  });
});

describe('dms start --log-format', { timeout: 90_000 }, () => {
  /** Starts a node at info level with `args`, stops it, and returns what it wrote. */
  async function logsOf(args: string[]): Promise<string> {
    const node = await startNode({ args: ['--log-level', 'info', ...args] });
    await node.stop();
    removeHome(node.home);
    return node.logs();
  }

  const lines = (text: string) => text.split('\n').filter((l) => l.trim());
  const isJson = (line: string) => {
    try {
      return typeof JSON.parse(line) === 'object';
    } catch {
      return false;
    }
  };

  it('pretty prints human-readable lines, not JSON', async () => {
    const out = await logsOf(['--log-format', 'pretty']);
    const started = lines(out).find((l) => l.includes('node started'));
    expect(started, out).toBeDefined();
    expect(started).toMatch(/INFO/);
    expect(lines(out).filter(isJson)).toEqual([]);
  });

  it('at a terminal, without --log-format, the lines are human-readable', async () => {
    // `script` gives the node a pseudo-terminal, as a person starting it in a shell has.
    const home = prepareHome('log-tty');
    const command = `${process.execPath} ${CLI} --home ${home} start --port 0 --log-level info`;
    const child = spawn('script', ['-qfec', command, '/dev/null'], { cwd: home, env: cleanEnv(), stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    child.stdout!.on('data', (d) => (out += d));
    child.stderr!.on('data', (d) => (out += d));
    const exited = new Promise((resolve) => child.once('exit', resolve));
    try {
      await waitFor('the node at a terminal to say it started', async () => out.includes('node started'), { timeoutMs: 60_000 });
    } finally {
      const pid = readInfo(home)?.pid;
      if (pid) process.kill(pid, 'SIGTERM');
      else child.kill('SIGKILL');
      await exited;
    }
    const started = lines(out).find((l) => l.includes('node started'))!;
    expect(started).toMatch(/INFO/);
    expect(lines(out).filter((l) => isJson(l.trim()))).toEqual([]);
  });

  it('without a terminal the default stays JSON lines, as does --log-format json', async () => {
    for (const args of [[], ['--log-format', 'json']]) {
      const out = await logsOf(args);
      const started = lines(out).filter(isJson).map((l) => JSON.parse(l) as { msg?: string; level?: number });
      expect(started.find((l) => l.msg === 'node started'), out).toMatchObject({ level: 30 });
    }
  });

  it('an unknown format is refused naming the choices', async () => {
    const r = await dms(prepareHome('log-format-bad'), ['start', '--port', '0', '--log-format', 'xml']);
    expect(r.code).not.toBe(0);
    expect(r.stderr).toMatch(/--log-format.*'xml'.*(pretty, json|json, pretty)/);
  });
});

describe('dms start with a Docker engine that never answers', { timeout: 60_000 }, () => {
  it("is healthy once the engine's 20 s to list the node's containers passed: its events and networks are looked at in the background", async () => {
    // Found on a running node: start-up waited on the engine's first answers (its oom events, the
    // ensemble networks an earlier run left, the containers it left, for an hour), so a hung
    // engine kept the node from serving.
    const dir = mkdtempSync(join(tmpdir(), 'dms-hung-engine-'));
    const socketPath = join(dir, 'docker.sock');
    const held = new Set<Socket>();
    const engine = createServer((s) => {
      held.add(s);
      s.on('error', () => undefined);
    });
    await new Promise<void>((r) => engine.listen(socketPath, r));
    try {
      // The engine may take 20 s to list the containers the node left (reconcile), and is then given up.
      const node = await startNode({ env: { DOCKER_HOST: `unix://${socketPath}` }, timeoutMs: 40_000 });
      expect(held.size, 'the node asked the engine').toBeGreaterThan(0);
      await node.stop();
      removeHome(node.home);
    } finally {
      for (const s of held) s.destroy();
      engine.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
