import { request } from 'node:http';
import { SignJWT } from 'jose';
import { describe, expect, it } from 'vitest';
import { newCaller, rootOf, wire } from '../helpers/envelopes.js';
import { type NodeProcess, runCli, tempHome } from '../helpers/node.js';
import { nodeStarter } from '../helpers/started.js';
import { waitFor } from '../helpers/raw-http.js';

/** REST credentials on a real node: API keys and JWTs on and off, every role, and what stays open. */

const start = nodeStarter({ network: { enabled: false } });

interface Answer {
  status: number;
  error?: string;
  text: string;
  headers: Headers;
}

async function call(node: NodeProcess, method: string, path: string, headers: Record<string, string> = {}, body?: string): Promise<Answer> {
  const res = await fetch(node.url + path, { method, headers: { 'content-type': 'application/json', ...headers }, body });
  const text = await res.text();
  let error: string | undefined;
  try {
    error = JSON.parse(text).error;
  } catch {
    error = undefined;
  }
  return { status: res.status, error, text, headers: res.headers };
}

/** A signed invoke of /public/hello: allowed to anyone whose REST credentials let them POST to the actor interface. */
const invoke = (node: NodeProcess, headers: Record<string, string>) =>
  call(node, 'POST', '/api/v1/actor/invoke', headers, wire(newCaller(), { to: rootOf(node.peerId), be: '/public/hello', cont: '/private/r' }));

async function apiKey(home: string, role: string): Promise<string> {
  const r = await runCli(['--home', home, 'auth', 'apikey', 'create', '--role', role, '--name', `${role}-key`]);
  expect(r.code, r.stderr).toBe(0);
  return r.stdout.trim();
}

const SECRET = 'a-jwt-secret-for-tests-that-is-long-enough-0123456789';
const jwt = (claims: Record<string, unknown>, opts: { secret?: string; exp?: string | number | null; alg?: string } = {}) => {
  const t = new SignJWT(claims).setProtectedHeader({ alg: opts.alg ?? 'HS256' }).setIssuedAt();
  if (opts.exp !== null) t.setExpirationTime(opts.exp ?? '5m');
  return t.sign(new TextEncoder().encode(opts.secret ?? SECRET));
};

describe('REST auth off (the default)', () => {
  it('answers without credentials, and ignores credentials it does not use', async () => {
    const node = await start();
    expect((await invoke(node, {})).status).toBe(200);
    expect((await call(node, 'GET', '/api/v1/actor/handle', { 'x-api-key': 'whatever' })).status).toBe(200);
  });
});

describe('API keys on', () => {
  it('require X-API-Key everywhere but /health, with roles admin, operator and viewer', async () => {
    const home = tempHome();
    const keys = { admin: await apiKey(home, 'admin'), operator: await apiKey(home, 'operator'), viewer: await apiKey(home, 'viewer') };
    const node = await start({ home, env: { DMS_API_KEY_ENABLED: 'true' } });

    for (const p of ['/health', '/api/v1/health']) expect((await call(node, 'GET', p)).status).toBe(200);
    const none = await call(node, 'GET', '/api/v1/actor/handle');
    expect(none.status).toBe(401);
    expect(none.error).toBe('missing credentials: send X-API-Key');
    expect(none.headers.get('www-authenticate')).toMatch(/ApiKey/);
    const forged = keys.admin.slice(0, -4) + 'AAAA';
    const bad = await call(node, 'GET', '/api/v1/actor/handle', { 'x-api-key': forged });
    expect(bad.status).toBe(401);
    expect(bad.error).toBe('invalid API key');
    expect(bad.text).not.toContain(forged);
    expect((await call(node, 'GET', '/api/v1/actor/handle', { 'x-api-key': 'dms_0000' })).status).toBe(401);
    expect((await call(node, 'GET', '/config', { authorization: 'Bearer x' })).status).toBe(401);

    // viewer: reads only.
    const v = { 'x-api-key': keys.viewer };
    expect((await call(node, 'GET', '/api/v1/actor/handle', v)).status).toBe(200);
    expect((await call(node, 'GET', '/config', v)).status).toBe(200);
    const vInvoke = await invoke(node, v);
    expect(vInvoke.status).toBe(403);
    expect(vInvoke.error).toBe('role viewer may not POST /api/v1/actor/invoke');

    // operator: the actor interface and jobs, not the rest of what writes.
    const o = { 'x-api-key': keys.operator };
    expect((await invoke(node, o)).status).toBe(200);
    // Past auth, the jobs route itself refuses the empty spec.
    const oJob = await call(node, 'POST', '/api/v1/jobs', o, '{}');
    expect(oJob.status, oJob.text).toBe(400);
    expect(oJob.error).toMatch(/^invalid job spec/);
    const oDevice = await call(node, 'PUT', '/api/v1/device/config', o, '{}');
    expect(oDevice.status).toBe(403);
    expect(oDevice.error).toBe('role operator may not PUT /api/v1/device/config');
    expect((await call(node, 'GET', '/api/v1/dev/stream', o)).status).toBe(403);
    expect((await call(node, 'GET', '/dev', o)).status).toBe(403);

    // admin: everything (what answers next is the route's business, not auth's).
    const a = { 'x-api-key': keys.admin };
    expect((await invoke(node, a)).status).toBe(200);
    const aDevice = await call(node, 'PUT', '/api/v1/device/config', a, '{}');
    expect(aDevice.status, aDevice.text).toBe(200);
    const dev = await call(node, 'GET', '/api/v1/dev/stream', a);
    expect(dev.status).toBe(404);
    expect(dev.error).toBe('no route GET /api/v1/dev/stream: dev mode is off (start the node with --dev)');
  });

  it('picks up keys created and revoked while the node runs', async () => {
    const node = await start({ env: { DMS_API_KEY_ENABLED: 'true' } });
    const key = await apiKey(node.home, 'operator');
    const id = key.split('_')[1];
    await waitFor('the new key to be accepted', async () => (await invoke(node, { 'x-api-key': key })).status === 200, 15_000);
    const list = await runCli(['--home', node.home, '--json', 'auth', 'apikey', 'list']);
    const listed = JSON.parse(list.stdout);
    expect(listed).toEqual([expect.objectContaining({ id, role: 'operator' })]);
    expect(list.stdout).not.toContain(key.slice('dms_'.length + 17));
    expect(list.stdout).not.toMatch(/sha256/);
    expect((await runCli(['--home', node.home, 'auth', 'apikey', 'revoke', id])).code).toBe(0);
    await waitFor('the revoked key to be refused', async () => (await invoke(node, { 'x-api-key': key })).status === 401, 15_000);
  });
});

/** The status of a GET with exactly this path; the body is not waited for (an admitted dev stream never ends). */
function statusOf(node: NodeProcess, path: string, headers: Record<string, string>): Promise<{ status: number; error?: string }> {
  return new Promise((resolve, reject) => {
    const req = request(`${node.url}/`, { path, headers, timeout: 20_000 }, (res) => {
      if (String(res.headers['content-type']).startsWith('text/event-stream')) {
        res.destroy();
        return resolve({ status: res.statusCode ?? 0 });
      }
      let text = '';
      res.on('data', (d) => (text += d));
      res.on('end', () => {
        let error: string | undefined;
        try {
          error = JSON.parse(text).error;
        } catch {
          error = undefined;
        }
        resolve({ status: res.statusCode ?? 0, error });
      });
    });
    req.on('error', reject);
    req.on('timeout', () => req.destroy(new Error(`timeout: GET ${path}`)));
    req.end();
  });
}

describe('the dev page and stream (admin only), by every spelling of their paths', () => {
  it('refuse a viewer and an operator with 403 however the path is written; an admin gets them', async () => {
    const home = tempHome();
    const keys = { admin: await apiKey(home, 'admin'), operator: await apiKey(home, 'operator'), viewer: await apiKey(home, 'viewer') };
    const node = await start({ home, env: { DMS_API_KEY_ENABLED: 'true' }, config: { network: { enabled: false }, general: { debug: true } } });
    const variants = [
      '/dev',
      '/dev/',
      '/dev//',
      '//dev',
      '/DEV',
      '/Dev/',
      '/%64ev',
      '/%64%65%76/',
      '/dev%2F',
      '/dev?x=1',
      '/api/v1/dev/stream',
      '/api/v1/dev/stream/',
      '/api/v1//dev/stream',
      '//api/v1/dev/stream',
      '/api/v1/DEV/stream',
      '/API/V1/dev/stream',
      '/api/v1/%64ev/stream',
      '/api/v1/dev/%73tream',
      '/api/v1/dev',
    ];
    for (const role of ['viewer', 'operator'] as const) {
      for (const path of variants) {
        const r = await statusOf(node, path, { 'x-api-key': keys[role] });
        expect(r.status, `${role} GET ${path}: ${r.error}`).toBe(403);
        expect(r.error, path).toMatch(new RegExp(`^role ${role} may not GET /`));
      }
    }
    // A path with a dot-segment is refused before any role is looked at (http/request-target.ts).
    for (const role of ['viewer', 'operator', 'admin'] as const) {
      for (const path of ['/./dev', '/x/../dev', '/api/v1/x/../dev/stream']) {
        const r = await statusOf(node, path, { 'x-api-key': keys[role] });
        expect([r.status, r.error], `${role} GET ${path}`).toEqual([400, expect.stringMatching(/is a dot-segment/)]);
      }
    }
    // The genuine paths still answer an admin.
    for (const path of ['/dev', '/dev/', '/api/v1/dev/stream']) expect((await statusOf(node, path, { 'x-api-key': keys.admin })).status, path).toBe(200);
  });
});

describe('JWTs on', () => {
  it('require a valid HS256 bearer token with exp and a role', async () => {
    const node = await start({ env: { DMS_JWT_SECRET: SECRET } });
    const bearer = async (claims: Record<string, unknown>, opts = {}) => ({ authorization: `Bearer ${await jwt(claims, opts)}` });

    const none = await invoke(node, {});
    expect(none.status).toBe(401);
    expect(none.error).toBe('missing credentials: send Authorization: Bearer <JWT>');
    expect((await invoke(node, await bearer({ role: 'operator', sub: 'ci' }))).status).toBe(200);
    expect((await invoke(node, await bearer({ role: 'admin' }))).status).toBe(200);
    const viewer = await invoke(node, await bearer({ role: 'viewer' }));
    expect(viewer.status).toBe(403);
    expect((await call(node, 'GET', '/api/v1/actor/handle', await bearer({ role: 'viewer' }))).status).toBe(200);

    const expired = await invoke(node, await bearer({ role: 'admin' }, { exp: Math.floor(Date.now() / 1000) - 60 }));
    expect(expired.status).toBe(401);
    expect(expired.error).toBe('bearer token expired');
    const noExp = await invoke(node, await bearer({ role: 'admin' }, { exp: null }));
    expect(noExp.status).toBe(401);
    expect(noExp.error).toMatch(/exp claim/);
    const wrongSecret = await invoke(node, await bearer({ role: 'admin' }, { secret: 'another-secret-of-enough-length-0123456789abcdef' }));
    expect(wrongSecret.status).toBe(401);
    expect(wrongSecret.error).toBe('invalid bearer token');
    const hs512 = await invoke(node, await bearer({ role: 'admin' }, { alg: 'HS512' }));
    expect(hs512.status).toBe(401);
    const unsigned = `${Buffer.from('{"alg":"none"}').toString('base64url')}.${Buffer.from(JSON.stringify({ role: 'admin', exp: 9_999_999_999 })).toString('base64url')}.`;
    expect((await invoke(node, { authorization: `Bearer ${unsigned}` })).status).toBe(401);
    const noRole = await invoke(node, await bearer({ sub: 'someone' }));
    expect(noRole.status).toBe(403);
    expect(noRole.error).toMatch(/carries no role/);
    expect((await call(node, 'GET', '/health')).status).toBe(200);
    expect((await invoke(node, { 'x-api-key': 'dms_x' })).error).toMatch(/API keys are not enabled/);
  });

  it('accept either credential when API keys and JWTs are both on; `dms auth token` signs one', async () => {
    const home = tempHome();
    const key = await apiKey(home, 'operator');
    const node = await start({ home, env: { DMS_API_KEY_ENABLED: 'true', DMS_JWT_SECRET: SECRET } });
    expect((await invoke(node, { 'x-api-key': key })).status).toBe(200);
    const made = await runCli(['--home', home, 'auth', 'token', '--role', 'operator', '--expiry', '10m'], { DMS_JWT_SECRET: SECRET });
    expect(made.code, made.stderr).toBe(0);
    expect((await invoke(node, { authorization: `Bearer ${made.stdout.trim()}` })).status).toBe(200);
    const none = await invoke(node, {});
    expect(none.error).toBe('missing credentials: send X-API-Key or Authorization: Bearer <JWT>');
    // The CLI authenticates with DMS_API_KEY.
    const cli = await runCli(['--home', home, 'actor', 'invoke', '/public/hello'], { DMS_API_KEY: key });
    expect(cli.code, cli.stderr).toBe(0);
    const refused = await runCli(['--home', home, 'actor', 'invoke', '/public/hello']);
    expect(refused.stderr).toMatch(/missing credentials.*HTTP 401/);
  });
});

describe('secrets', () => {
  it('never appear in /config (debug mode), the logs, or error texts', async () => {
    const home = tempHome();
    const key = await apiKey(home, 'admin');
    const passphrase = 'passphrase-that-must-never-leak';
    const init = await runCli(['--home', home, 'init'], { DMS_PASSPHRASE: passphrase });
    expect(init.code, init.stderr).toBe(0);
    const node = await start({ home, args: ['--debug', '--log-level', 'debug'], env: { DMS_API_KEY_ENABLED: 'true', DMS_JWT_SECRET: SECRET, DMS_PASSPHRASE: passphrase } });
    const admin = { 'x-api-key': key };
    const config = await call(node, 'GET', '/config', admin);
    expect(config.status).toBe(200);
    expect(JSON.parse(config.text).config.auth).toEqual({ api_key_enabled: true, jwt_secret: '[redacted]', jwt_max_lifetime_s: 86_400, jwt_issuer: '', jwt_audience: '' });
    const secrets = [SECRET, key, key.slice('dms_'.length + 17), passphrase];
    await invoke(node, { 'x-api-key': `${key}x` });
    await invoke(node, { authorization: `Bearer ${await jwt({ role: 'admin' }, { secret: 'x'.repeat(40) })}` });
    const texts = [config.text, (await call(node, 'GET', '/api/v1/config', admin)).text, (await invoke(node, { 'x-api-key': `${key}x` })).text, node.logs()];
    for (const text of texts) for (const s of secrets) expect(text).not.toContain(s);
  });
});

describe('exposure warnings', () => {
  it('warn about REST on a non-loopback address without auth (accepted by rest.insecure), and without TLS when auth is on', async () => {
    const open = await start({ env: { DMS_HOST: '0.0.0.0' }, config: { rest: { insecure: true } } });
    expect(open.logs()).toMatch(/non-loopback address without authentication/);
    const authed = await start({ env: { DMS_HOST: '0.0.0.0', DMS_JWT_SECRET: SECRET } });
    expect(authed.logs()).not.toMatch(/without authentication/);
    expect(authed.logs()).toMatch(/without TLS/);
    const loopback = await start({ env: { DMS_JWT_SECRET: 'short' } });
    expect(loopback.logs()).not.toMatch(/non-loopback/);
    expect(loopback.logs()).toMatch(/jwt_secret is short/);
  });
});
