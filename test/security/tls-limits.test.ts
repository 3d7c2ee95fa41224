import { execFileSync, spawn } from 'node:child_process';
import { copyFileSync, existsSync, readFileSync, writeFileSync } from 'node:fs';
import { request } from 'node:https';
import { connect, type Socket } from 'node:net';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { newCaller, post, rootOf, wire } from '../helpers/envelopes.js';
import { DevEvents, waitFor } from '../helpers/network.js';
import { CLI, type NodeProcess, removeHome, TEST_ENV, tempHome } from '../helpers/node.js';
import { nodeStarter } from '../helpers/started.js';

const start = nodeStarter();
const cleanups: (() => Promise<void> | void)[] = [];
afterAll(async () => {
  for (const c of cleanups.splice(0)) await c();
});

/** GET over HTTPS trusting only `ca`; resolves with status and body, rejects on any TLS failure. */
function httpsGet(url: string, ca?: string): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    // A connection of its own each time: a kept-alive one would pass for a new client.
    const req = request(url, { method: 'GET', ca, timeout: 5_000, agent: false }, (res) => {
      let body = '';
      res.on('data', (d) => (body += d));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
    });
    req.on('error', reject);
    req.on('timeout', () => req.destroy(new Error('timeout')));
    req.end();
  });
}

/** A node serving HTTPS with a self-signed certificate made here; its URL and the certificate to trust. */
async function tlsNode(config: object = {}): Promise<{ url: string; ca: string }> {
  const home = tempHome();
  const cert = join(home, 'cert.pem');
  const key = join(home, 'key.pem');
  execFileSync('openssl', [
    'req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes', '-days', '1',
    '-keyout', key, '-out', cert, '-subj', '/CN=localhost', '-addext', 'subjectAltName=IP:127.0.0.1,DNS:localhost',
  ], { stdio: 'ignore' });
  writeFileSync(join(home, 'dms_config.json'), JSON.stringify({ network: { enabled: false }, ...config }));
  const proc = spawn(process.execPath, [CLI, '--home', home, 'start', '--port', '0', '--log-level', 'warn'], {
    env: { ...process.env, ...TEST_ENV, DMS_TLS_ENABLED: 'true', DMS_TLS_CERT_FILE: cert, DMS_TLS_KEY_FILE: key },
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  let stderr = '';
  proc.stderr!.on('data', (d) => (stderr += d));
  const exited = new Promise<void>((r) => proc.once('exit', () => r()));
  cleanups.push(async () => {
    proc.kill('SIGTERM');
    await exited;
    removeHome(home);
  });
  const ca = readFileSync(cert, 'utf8');
  const url = await waitFor(
    'the HTTPS node to come up',
    async () => {
      const info = existsSync(join(home, 'node.json')) ? JSON.parse(readFileSync(join(home, 'node.json'), 'utf8')) : undefined;
      if (info?.pid !== proc.pid) return false;
      return (await httpsGet(`${info.url}/health`, ca)).status === 200 && (info.url as string);
    },
    { timeoutMs: 20_000, intervalMs: 100 },
  ).catch((e: unknown) => expect.fail(`${String(e)}\nnode stderr:\n${stderr}`));
  return { url, ca };
}

describe('TLS', () => {
  it('serves HTTPS only, with a self-signed certificate made here', async () => {
    const { url, ca } = await tlsNode();
    expect(url).toMatch(/^https:\/\/127\.0\.0\.1:\d+$/);
    const handle = await httpsGet(`${url}/api/v1/actor/handle`, ca);
    expect(handle.status).toBe(200);
    expect(JSON.parse(handle.body).addr.inbox).toBe('root');
    // The certificate is what makes the connection trusted: without it, TLS refuses.
    await expect(httpsGet(`${url}/health`)).rejects.toThrow(/self[- ]signed|unable to verify/i);
    // Plain HTTP on the same port gets no answer.
    await expect(fetch(`${url.replace('https:', 'http:')}/health`, { signal: AbortSignal.timeout(5_000) })).rejects.toThrow();
  });

  it('keeps room past rest.max_connections for a client while others hold handshakes they never begin', async () => {
    // Found by a hostile client against a running node: TCP connections that never sent a
    // ClientHello counted against the bound but not among the connections that could make room,
    // so max_connections of them kept every client out for Node's handshake timeout (120 s).
    const { url, ca } = await tlsNode({ rest: { max_connections: 8 } });
    const { hostname, port } = new URL(url);
    const silent: Socket[] = [];
    try {
      for (let i = 0; i < 12; i++) {
        const s = connect({ host: hostname, port: Number(port) });
        s.on('error', () => {});
        silent.push(s);
        await new Promise((r) => s.once('connect', r));
      }
      expect((await httpsGet(`${url}/health`, ca)).status).toBe(200);
      expect((await httpsGet(`${url}/health`, ca)).status).toBe(200);
    } finally {
      for (const s of silent) s.destroy();
    }
  });
});

describe('limits', () => {
  it('answers 413 above a configured body limit, before reading it all', async () => {
    const node = await start({ config: { network: { enabled: false }, rest: { body_limit: 2048 } } });
    const big = await post(`${node.url}/api/v1/actor/send`, 'x'.repeat(4096));
    expect(big.status).toBe(413);
    expect(big.json.error).toBe('request body is larger than the limit of 2048 bytes');
    const ok = await post(`${node.url}/api/v1/actor/send`, wire(newCaller(), { to: rootOf(node.peerId), be: '/public/hello' }));
    expect(ok.status).toBe(200);
  });

  it('answers 429 with Retry-After past the per-client rate, on the actor interface only', async () => {
    const node = await start({ config: { network: { enabled: false }, rest: { rate_limit: { per_second: 0.5, burst: 3, loopback: true } } } });
    const hello = () => post(`${node.url}/api/v1/actor/send`, wire(newCaller(), { to: rootOf(node.peerId), be: '/public/hello' }));
    const statuses: number[] = [];
    let limited: Awaited<ReturnType<typeof post>> | undefined;
    for (let i = 0; i < 6; i++) {
      const r = await hello();
      statuses.push(r.status);
      if (r.status === 429) limited ??= r;
    }
    // A burst of 3 at 0.5/s: the 4th request within a few seconds is over, whatever the machine's pace.
    expect(statuses.slice(0, 3)).toEqual([200, 200, 200]);
    expect(limited, statuses.join(',')).toBeDefined();
    expect(Number(limited!.headers.get('retry-after'))).toBeGreaterThanOrEqual(1);
    expect(limited!.json.error).toMatch(/^rate limit: at most 0.5 requests per second \(burst 3\)/);
    expect((await fetch(`${node.url}/health`)).status).toBe(200);
  });

  it('exempts loopback clients from the rate limit by default', async () => {
    const node = await start({ config: { network: { enabled: false }, rest: { rate_limit: { per_second: 0.5, burst: 1 } } } });
    for (let i = 0; i < 4; i++) {
      expect((await post(`${node.url}/api/v1/actor/send`, wire(newCaller(), { to: rootOf(node.peerId), be: '/public/hello' }))).status).toBe(200);
    }
  });

  /** A node with the slow plugin, in debug mode for its dev event stream (which shows deliveries). */
  async function slowNode(rest: object): Promise<NodeProcess> {
    const home = tempHome();
    copyFileSync(new URL('../fixtures/plugins/slow.mjs', import.meta.url), join(home, 'slow.mjs'));
    return start({ home, env: { DMS_DEBUG: 'true' }, config: { network: { enabled: false }, plugins: { modules: ['./slow.mjs'] }, rest } });
  }

  /** Invokes the slow plugin as the operator (non-public behaviors need a capability). */
  const slowCall = (node: NodeProcess) => {
    const operator = node.operator();
    return (ms: number) =>
      post(`${node.url}/api/v1/actor/invoke`, wire({ key: operator, inbox: `user-${Math.random().toString(16).slice(2)}` }, {
        to: { ...rootOf(node.peerId), addr: { host: '', inbox: 'slow' } },
        be: '/plugin/slow/wait',
        payload: { ms },
        cont: '/private/r',
        ttlMs: 30_000,
      }));
  };

  /**
   * Starts two slow invokes and resolves once the slow actor has both: the node counts an
   * invoke as waiting before it delivers it, so both are pending then, for `ms`.
   */
  async function twoWaiting(node: NodeProcess, slow: (ms: number) => ReturnType<typeof post>, ms: number) {
    const watch = await DevEvents.open(node.url, ['envelope']);
    try {
      const waiting = [slow(ms), slow(ms)];
      await waitFor('both invokes to reach the slow actor', () => watch.events.filter((e) => e.type === 'envelope' && e.direction === 'in' && e.actor === 'slow').length >= 2, { intervalMs: 20 });
      return waiting;
    } finally {
      watch.close();
    }
  }

  // Long enough for the third request to arrive while both still wait, on a loaded machine.
  const SLOW_MS = 8_000;

  it('bounds invokes one client has waiting: 429 with Retry-After', { timeout: 60_000 }, async () => {
    const node = await slowNode({ max_pending_per_client: 2, rate_limit: { per_second: 0, loopback: true } });
    const slow = slowCall(node);
    const waiting = await twoWaiting(node, slow, SLOW_MS);
    const third = await slow(10);
    expect(third.status).toBe(429);
    expect(third.headers.get('retry-after')).toBe('1');
    expect(third.json.error).toMatch(/too many requests of yours waiting for replies \(2\)/);
    expect((await Promise.all(waiting)).map((r) => r.status)).toEqual([200, 200]);
    expect((await slow(10)).status).toBe(200);
  });

  it('bounds invokes waiting in all: 503 with Retry-After', { timeout: 60_000 }, async () => {
    const node = await slowNode({ max_pending: 2 });
    const slow = slowCall(node);
    const waiting = await twoWaiting(node, slow, SLOW_MS);
    const third = await slow(10);
    expect(third.status).toBe(503);
    expect(third.headers.get('retry-after')).toBe('1');
    expect((await Promise.all(waiting)).map((r) => r.status)).toEqual([200, 200]);
  });
});
