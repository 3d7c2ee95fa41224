import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { SignJWT } from 'jose';
import { describe, expect, it, onTestFinished } from 'vitest';
import { newCaller, post, rootOf, wire } from '../helpers/envelopes.js';
import { type NodeProcess, removeHome, runCli, tempHome } from '../helpers/node.js';
import { nodeStarter } from '../helpers/started.js';

const start = nodeStarter({}, 'each');

const SECRET = 'jwt-secret-that-must-never-leak-1234';

describe('debug mode', () => {
  it.each([
    ['DMS_DEBUG=true', { env: { DMS_DEBUG: 'true', DMS_JWT_SECRET: SECRET } }],
    ['--debug', { args: ['--debug'], env: { DMS_JWT_SECRET: SECRET } }],
    ['general.debug in the config file', { config: { general: { debug: true } }, env: { DMS_JWT_SECRET: SECRET } }],
  ])('%s makes /config return the config with secrets redacted', async (_name, opts) => {
    const node = await start(opts);
    // A JWT secret turns REST auth on: the caller needs a token signed with it.
    const jwt = await new SignJWT({ role: 'viewer' }).setProtectedHeader({ alg: 'HS256' }).setExpirationTime('5m').sign(new TextEncoder().encode(SECRET));
    for (const p of ['/config', '/api/v1/config']) {
      const res = await fetch(node.url + p, { headers: { authorization: `Bearer ${jwt}` } });
      const text = await res.text();
      expect(res.status).toBe(200);
      expect(text).not.toContain(SECRET);
      const { config } = JSON.parse(text);
      expect(config.general.debug).toBe(true);
      expect(config.auth.jwt_secret).toBe('[redacted]');
      expect(config.rest.addr).toBe('127.0.0.1');
      expect(config.network.ListenAddresses).toEqual(['/ip4/127.0.0.1/tcp/0']);
    }
    expect(node.logs()).not.toContain(SECRET);
  });
});

describe('unsigned envelopes', () => {
  const hello = (node: NodeProcess) => wire(newCaller(false), { to: rootOf(node.peerId), be: '/public/hello', cont: '/private/r' });

  it('are refused when rest.allow_unsigned is false', async () => {
    const node = await start({ config: { rest: { allow_unsigned: false } } });
    const res = await post(`${node.url}/api/v1/actor/invoke`, hello(node));
    expect(res.status).toBe(400);
    expect(res.json.error).toMatch(/sig is required/);
    const signed = await post(`${node.url}/api/v1/actor/invoke`, wire(newCaller(), { to: rootOf(node.peerId), be: '/public/hello', cont: '/r' }));
    expect(signed.status).toBe(200);
  });

  it('are refused by default when REST is bound to a non-loopback address', async () => {
    // Without credentials such a node starts only with rest.insecure (test/security/rest-hardening.test.ts).
    const node = await start({ env: { DMS_HOST: '0.0.0.0' }, config: { rest: { insecure: true } } });
    const url = node.url.replace('0.0.0.0', '127.0.0.1');
    const res = await post(`${url}/api/v1/actor/invoke`, hello(node));
    expect(res.status).toBe(400);
    expect(res.json.error).toMatch(/sig is required/);
    expect(node.logs()).toMatch(/non-loopback/);
  });
});

describe('configuration errors stop start-up naming the key', () => {
  it.each([
    [{ DMS_PORT: 'abc' }, /DMS_PORT.*'abc'.*not a number/],
    [{ DMS_PORT: '70000' }, /DMS_PORT.*rest.port/],
    [{ DMS_DEBUG: 'maybe' }, /DMS_DEBUG.*not a boolean/],
    [{ DMS_API_KEY_ENABLED: 'sure' }, /DMS_API_KEY_ENABLED.*not a boolean/],
    [{ DMS_DB_TYPE: 'oracle' }, /DMS_DB_TYPE.*db.type/],
  ])('%o', async (env, pattern) => {
    const home = tempHome();
    onTestFinished(() => removeHome(home));
    const r = await runCli(['--home', home, 'start', '--port', '0'], env as Record<string, string>);
    expect(r.code).not.toBe(0);
    expect(r.stderr).toMatch(pattern);
    expect(r.stderr.trim().split('\n')).toHaveLength(1);
  });

  it('an invalid config file', async () => {
    const home = tempHome();
    onTestFinished(() => removeHome(home));
    writeFileSync(join(home, 'dms_config.json'), JSON.stringify({ rest: { port: 'high' }, nonsense: 1 }));
    const r = await runCli(['--home', home, 'start']);
    expect(r.code).not.toBe(0);
    expect(r.stderr).toMatch(/rest\.port/);
    expect(r.stderr).toMatch(/nonsense/);
    writeFileSync(join(home, 'dms_config.json'), '{ not json');
    const r2 = await runCli(['--home', home, 'start']);
    expect(r2.stderr).toMatch(/dms_config.json: not valid JSON/);
  });

  it('a plugin that is not a plugin', async () => {
    const home = tempHome();
    onTestFinished(() => removeHome(home));
    writeFileSync(join(home, 'bad.mjs'), 'export default { name: "Bad Name", behaviors: [] }');
    writeFileSync(join(home, 'dms_config.json'), JSON.stringify({ plugins: { modules: ['./bad.mjs'] } }));
    const r = await runCli(['--home', home, 'start', '--port', '0']);
    expect(r.code).not.toBe(0);
    expect(r.stderr).toMatch(/plugins.modules: '.\/bad.mjs' is not a DMS plugin/);
  });
});

describe('environment', () => {
  it('reads DMS_HOST and DMS_PORT, and --port outranks DMS_PORT', async () => {
    const probe = await start();
    const port = Number(new URL(probe.url).port);
    await probe.stop();
    removeHome(probe.home);
    const node = await start({ env: { DMS_HOST: '127.0.0.1', DMS_PORT: String(port) }, configuredPort: true });
    expect(node.url).toBe(`http://127.0.0.1:${port}`);
    const flagged = await start({ env: { DMS_PORT: String(port) } });
    expect(Number(new URL(flagged.url).port)).not.toBe(port);
  });
});
