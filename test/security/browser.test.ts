import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { newCaller, rootOf, wire } from '../helpers/envelopes.js';
import { type NodeProcess, removeHome, runCli, startNode, tempHome } from '../helpers/node.js';
import { raw, waitFor } from '../helpers/raw-http.js';

/**
 * A web page the operator happens to visit attacks the node on 127.0.0.1: simple requests
 * (text/plain, no preflight), cross-origin fetches, DNS rebinding (a page whose own name now
 * resolves to 127.0.0.1, so the browser sends `Host: attacker.example`), and unsigned
 * envelopes the node would sign as its operator. No foreign origin is served by default (the
 * old defaults localhost:9991/9992 included); a listed one only with credentials. Every attack
 * is refused before it has any effect; local tools (curl, node fetch, the dms CLI) and the
 * node's own pages (same-origin) keep working.
 */

let node: NodeProcess;
const ALLOWED_ORIGIN = 'http://localhost:9991';
const EVIL = 'http://evil.example';

beforeAll(async () => {
  node = await startNode({ config: { network: { enabled: false }, rest: { allowed_hosts: ['dms.lan'] } } });
});
afterAll(async () => {
  await node?.stop();
  removeHome(node.home);
});

const url = (path: string) => node.url + path;
const port = () => new URL(node.url).port;

/** The job a page submits: the null executor plays it back, so its existence is the effect. */
const JOB = JSON.stringify({
  name: 'drive-by',
  image: 'alpine',
  executor: 'null',
  environment: {},
  resources: { cpu: { cores: 0.1 }, memory: { size: 16 * 1024 * 1024 } },
});

/** The unsigned envelope that renamed the device: the node signs it as the operator. */
const rename = (name: string) =>
  wire(newCaller(false), { to: { id: '', did: '', addr: { host: '', inbox: 'resources' } }, be: '/dms/device/config', payload: { name } });

/** An unsigned invoke of /public/hello, as the README's curl example sends it. */
const unsignedHello = () => wire(newCaller(false), { to: rootOf(node.peerId), be: '/public/hello', cont: '/private/reply' });

async function jobCount(): Promise<number> {
  const r = await raw(url('/api/v1/jobs'));
  expect(r.status, r.text).toBe(200);
  const body = r.json;
  return (Array.isArray(body) ? body : body.jobs).length;
}

async function deviceName(): Promise<string> {
  const r = await raw(url('/api/v1/device/status'));
  expect(r.status, r.text).toBe(200);
  return r.json.name;
}

async function healthy(): Promise<void> {
  expect((await raw(url('/health'))).status).toBe(200);
}

describe('Content-Type', () => {
  it('refuses a text/plain job submission (a simple request needs no preflight) with 415, and no job is made', async () => {
    const r = await raw(url('/api/v1/jobs'), { method: 'POST', headers: { 'content-type': 'text/plain;charset=UTF-8' }, body: JOB });
    expect(r.status).toBe(415);
    expect(r.json.error).toMatch(/Content-Type must be application\/json/);
    expect(r.json.error).toMatch(/text\/plain/);
    await healthy();
    expect(await jobCount()).toBe(0);
  });

  it('refuses form encodings and bodies without a Content-Type, on every method that takes a body', async () => {
    for (const [method, path] of [
      ['POST', '/api/v1/jobs'],
      ['POST', '/api/v1/actor/send'],
      ['PUT', '/api/v1/device/config'],
      ['DELETE', '/api/v1/jobs/x'],
      ['PATCH', '/api/v1/jobs'],
    ]) {
      for (const type of ['application/x-www-form-urlencoded', 'multipart/form-data; boundary=x', undefined]) {
        const headers: Record<string, string> = type ? { 'content-type': type } : {};
        const r = await raw(url(path), { method, headers, body: method === 'POST' && path.endsWith('send') ? rename('pwned') : JOB });
        expect(r.status, `${method} ${path} ${type}: ${r.text}`).toBe(415);
        expect(r.json.error).toMatch(/application\/json/);
      }
    }
    await healthy();
    expect(await jobCount()).toBe(0);
    expect(await deviceName()).not.toBe('pwned');
  });

  it('accepts application/json with parameters, and GETs without a Content-Type', async () => {
    const r = await raw(url('/api/v1/actor/invoke'), { method: 'POST', headers: { 'content-type': 'Application/JSON; charset=utf-8' }, body: unsignedHello() });
    expect(r.status, r.text).toBe(200);
    for (const p of ['/health', '/api/v1/health']) expect((await raw(url(p))).status).toBe(200);
  });
});

/** The origins allowed by default before issue 26: pages on this machine got the whole REST API. */
const OLD_DEFAULTS = ['http://localhost:9991', 'http://localhost:9992'];

/** A signed invoke of /public/hello: what any REST caller may send. */
const signedHello = () => wire(newCaller(), { to: rootOf(node.peerId), be: '/public/hello', cont: '/private/r' });

const preflight = (base: string, origin: string) =>
  raw(`${base}/api/v1/jobs`, {
    method: 'OPTIONS',
    headers: { origin, 'access-control-request-method': 'POST', 'access-control-request-headers': 'content-type, x-api-key' },
  });

describe('Origin, by default (rest.cors.origins empty)', () => {
  it('refuses every route to every foreign origin, the old defaults included, with 403, and no job is made', async () => {
    for (const origin of [...OLD_DEFAULTS, EVIL, 'null']) {
      const job = await raw(url('/api/v1/jobs'), { method: 'POST', headers: { 'content-type': 'application/json', origin }, body: JOB });
      expect(job.status, `${origin}: ${job.text}`).toBe(403);
      expect(job.json.error).toBe(`origin ${origin} is not in rest.cors.origins`);
      for (const [method, path, body] of [
        ['GET', '/api/v1/actor/handle'],
        ['GET', '/api/v1/jobs'],
        ['GET', '/config'],
        ['GET', '/health'],
        ['POST', '/api/v1/actor/invoke', signedHello()],
        ['POST', '/api/v1/actor/send', rename('pwned')],
      ] as const) {
        const r = await raw(url(path), { method, headers: { 'content-type': 'application/json', origin }, body });
        expect(r.status, `${origin} ${method} ${path}: ${r.text}`).toBe(403);
        expect(r.json.error).toBe(`origin ${origin} is not in rest.cors.origins`);
      }
    }
    await healthy();
    expect(await jobCount()).toBe(0);
    expect(await deviceName()).not.toBe('pwned');
  });

  it('refuses the preflight of every foreign origin, and grants nothing', async () => {
    for (const origin of [...OLD_DEFAULTS, EVIL]) {
      const r = await preflight(node.url, origin);
      expect(r.status, origin).toBe(403);
      expect(r.headers['access-control-allow-origin']).toBeUndefined();
    }
  });

  it('serves a same-origin request: Origin is the scheme, host and port the request was sent to', async () => {
    // raw sends Host as the URL names it: 127.0.0.1:<port>, so node.url is this request's own origin.
    const own = await raw(url('/api/v1/actor/handle'), { headers: { origin: node.url } });
    expect(own.status, own.text).toBe(200);
    const invoke = await raw(url('/api/v1/actor/invoke'), { method: 'POST', headers: { 'content-type': 'application/json', origin: node.url }, body: signedHello() });
    expect(invoke.status, invoke.text).toBe(200);
    const byName = await raw(url('/api/v1/actor/handle'), { headers: { host: `localhost:${port()}`, origin: `http://localhost:${port()}` } });
    expect(byName.status, byName.text).toBe(200);
    // The same host at another port or scheme is another origin, and so is another name for the same address.
    for (const origin of [`http://127.0.0.1:${Number(port()) + 1}`, `https://127.0.0.1:${port()}`, `http://localhost:${port()}`, 'http://127.0.0.1']) {
      const r = await raw(url('/api/v1/actor/handle'), { headers: { origin } });
      expect(r.status, `${origin}: ${r.text}`).toBe(403);
      expect(r.json.error).toBe(`origin ${origin} is not in rest.cors.origins`);
    }
  });
});

describe('Origin, configured (rest.cors.origins) with API keys on', () => {
  let keyed: NodeProcess;
  let admin: string;
  let authOff: NodeProcess;

  beforeAll(async () => {
    const home = tempHome();
    const r = await runCli(['--home', home, 'auth', 'apikey', 'create', '--role', 'admin', '--name', 'page']);
    expect(r.code, r.stderr).toBe(0);
    admin = r.stdout.trim();
    const cors = { origins: [ALLOWED_ORIGIN] };
    [keyed, authOff] = await Promise.all([
      startNode({ home, env: { DMS_API_KEY_ENABLED: 'true' }, config: { network: { enabled: false }, rest: { cors } } }),
      startNode({ config: { network: { enabled: false }, rest: { cors } } }),
    ]);
  });
  afterAll(async () => {
    for (const n of [keyed, authOff]) {
      await n?.stop();
      if (n) removeHome(n.home);
    }
  });

  const jobs = async (n: NodeProcess) => {
    const r = await raw(`${n.url}/api/v1/jobs`, { headers: { 'x-api-key': admin } });
    expect(r.status, r.text).toBe(200);
    return (Array.isArray(r.json) ? r.json : r.json.jobs).length;
  };

  it('refuses the configured origin without credentials with 403, on every route', async () => {
    for (const [method, path, body] of [
      ['POST', '/api/v1/jobs', JOB],
      ['GET', '/api/v1/actor/handle'],
      ['GET', '/health'],
    ] as const) {
      const r = await raw(`${keyed.url}${path}`, { method, headers: { 'content-type': 'application/json', origin: ALLOWED_ORIGIN }, body });
      expect(r.status, `${method} ${path}: ${r.text}`).toBe(403);
      expect(r.json.error).toBe(`origin ${ALLOWED_ORIGIN}: a cross-origin request needs an API key or JWT`);
    }
    // A credential the node does not check is no credential: with REST auth off nothing cross-origin is served.
    const off = await raw(`${authOff.url}/api/v1/jobs`, { method: 'POST', headers: { 'content-type': 'application/json', origin: ALLOWED_ORIGIN, 'x-api-key': 'anything' }, body: JOB });
    expect(off.status, off.text).toBe(403);
    expect(off.json.error).toBe(`origin ${ALLOWED_ORIGIN}: a cross-origin request needs an API key or JWT, and REST auth is off on this node (auth.api_key_enabled, auth.jwt_secret)`);
    // A bad key is checked, on open paths too.
    const bad = await raw(`${keyed.url}/health`, { headers: { origin: ALLOWED_ORIGIN, 'x-api-key': 'dms_0000' } });
    expect(bad.status, bad.text).toBe(401);
    expect(await jobs(keyed)).toBe(0);
  });

  it('serves the configured origin with an API key, with CORS headers, and grants its preflight', async () => {
    const pre = await preflight(keyed.url, ALLOWED_ORIGIN);
    expect(pre.status).toBe(204);
    expect(pre.headers['access-control-allow-origin']).toBe(ALLOWED_ORIGIN);
    expect(String(pre.headers['access-control-allow-headers']).toLowerCase()).toContain('x-api-key');
    const job = await raw(`${keyed.url}/api/v1/jobs`, { method: 'POST', headers: { 'content-type': 'application/json', origin: ALLOWED_ORIGIN, 'x-api-key': admin }, body: JOB });
    expect(job.status, job.text).toBe(201);
    expect(job.headers['access-control-allow-origin']).toBe(ALLOWED_ORIGIN);
    const read = await raw(`${keyed.url}/api/v1/actor/handle`, { headers: { origin: ALLOWED_ORIGIN, 'x-api-key': admin } });
    expect(read.status, read.text).toBe(200);
    expect(await jobs(keyed)).toBe(1);
  });

  it('matches the configured origin exactly, never by prefix or suffix', async () => {
    for (const origin of [`${ALLOWED_ORIGIN}.evil`, `${ALLOWED_ORIGIN}0`, 'http://localhost:999', 'https://localhost:9991', 'http://evil.localhost:9991', 'http://localhost']) {
      const r = await raw(`${keyed.url}/api/v1/actor/handle`, { headers: { origin, 'x-api-key': admin } });
      expect(r.status, `${origin}: ${r.text}`).toBe(403);
      expect(r.json.error).toBe(`origin ${origin} is not in rest.cors.origins`);
      const pre = await preflight(keyed.url, origin);
      expect(pre.status, origin).toBe(403);
      expect(pre.headers['access-control-allow-origin']).toBeUndefined();
    }
  });

  it('never has the node sign an unsigned envelope for a page, even the configured origin with an admin key', async () => {
    const r = await raw(`${keyed.url}/api/v1/actor/send`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', origin: ALLOWED_ORIGIN, 'x-api-key': admin },
      body: rename('pwned'),
    });
    expect(r.status).toBe(403);
    expect(r.json.error).toMatch(/unsigned envelope from a browser.*sign it.*dms CLI/);
    const signed = await raw(`${keyed.url}/api/v1/actor/invoke`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', origin: ALLOWED_ORIGIN, 'x-api-key': admin },
      body: wire(newCaller(), { to: rootOf(keyed.peerId), be: '/public/hello', cont: '/private/r' }),
    });
    expect(signed.status, signed.text).toBe(200);
  });
});

describe('Host (DNS rebinding)', () => {
  it('refuses a Host that is not loopback, localhost, rest.addr or rest.allowed_hosts with 403', async () => {
    for (const host of [`attacker.example:${port()}`, 'attacker.example', `127.0.0.1.attacker.example:${port()}`, `[::2]:${port()}`]) {
      const r = await raw(url('/api/v1/actor/handle'), { headers: { host } });
      expect(r.status, host).toBe(403);
      expect(r.json.error).toMatch(/^host .* is not allowed/);
      // The rebinding page would read replies: nothing reaches a route, so no job is made either.
      const post = await raw(url('/api/v1/jobs'), { method: 'POST', headers: { host, 'content-type': 'application/json' }, body: JOB });
      expect(post.status, host).toBe(403);
    }
    await healthy();
    expect(await jobCount()).toBe(0);
  });

  it('answers loopback names, localhost, [::1] and rest.allowed_hosts, with or without port', async () => {
    for (const host of [`127.0.0.1:${port()}`, '127.0.0.1', `localhost:${port()}`, 'LOCALHOST', `[::1]:${port()}`, '[::1]', `dms.lan:${port()}`, 'dms.lan']) {
      const r = await raw(url('/api/v1/actor/handle'), { headers: { host } });
      expect(r.status, `${host}: ${r.text}`).toBe(200);
    }
  });
});

describe('unsigned envelopes from a browser', () => {
  it('are refused with 403 when Sec-Fetch headers say a browser sent them, and the device keeps its name', async () => {
    // (From another site, with Sec-Fetch-Site: cross-site, nothing is served at all: see below.)
    for (const headers of <Record<string, string>[]>[{ 'sec-fetch-site': 'same-origin' }, { 'sec-fetch-site': 'none', 'sec-fetch-mode': 'navigate' }, { 'sec-fetch-mode': 'navigate' }]) {
      const inv = await raw(url('/api/v1/actor/invoke'), { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: unsignedHello() });
      expect(inv.status, JSON.stringify(headers)).toBe(403);
      expect(inv.json.error).toMatch(/unsigned envelope from a browser.*sign it.*dms CLI/);
    }
    // The node's own page (same origin) does not get one signed either.
    const own = await raw(url('/api/v1/actor/send'), { method: 'POST', headers: { 'content-type': 'application/json', origin: node.url }, body: rename('pwned') });
    expect(own.status).toBe(403);
    await healthy();
    expect(await deviceName()).not.toBe('pwned');
  });

  it('stay possible for local tools: curl (no browser headers) and node fetch', async () => {
    const curl = await raw(url('/api/v1/actor/invoke'), { method: 'POST', headers: { 'content-type': 'application/json' }, body: unsignedHello() });
    expect(curl.status, curl.text).toBe(200);
    // Node's fetch sends `sec-fetch-mode: cors` on its own, and never Sec-Fetch-Site or Origin.
    const f = await fetch(url('/api/v1/actor/invoke'), { method: 'POST', headers: { 'content-type': 'application/json' }, body: unsignedHello() });
    expect(f.status, await f.clone().text()).toBe(200);
    // And the same rename a page could not do, a local tool does: proof the checks above would see an effect.
    const send = await raw(url('/api/v1/actor/send'), { method: 'POST', headers: { 'content-type': 'application/json' }, body: rename('renamed-locally') });
    expect(send.status, send.text).toBe(200);
    await waitFor('the device to be renamed', async () => (await deviceName()) === 'renamed-locally');
  });
});

describe('requests a page of another site makes without CORS (an image, a frame, a no-cors fetch, a link)', () => {
  it('are refused with 403 on every route, whatever they ask, and make no job', async () => {
    for (const site of ['cross-site', 'same-site', 'Cross-Site']) {
      for (const [method, path] of [['GET', '/api/v1/jobs'], ['GET', '/api/v1/dev/stream'], ['GET', '/health'], ['POST', '/api/v1/jobs']] as const) {
        const r = await raw(url(path), { method, headers: { 'sec-fetch-site': site, 'sec-fetch-mode': 'no-cors', ...(method === 'POST' ? { 'content-type': 'text/plain' } : {}) }, body: method === 'POST' ? JOB : undefined });
        expect(r.status, `${site} ${method} ${path}`).toBe(403);
        expect(r.json.error).toBe(`a request made by a page of another site is not served (Sec-Fetch-Site: ${site.toLowerCase()}): open the node's address directly, or use the dms CLI`);
      }
    }
    expect(await jobCount()).toBe(0);
  });

  it("serve the node's own pages and an address typed in (same-origin, none), and local tools (no Sec-Fetch-Site)", async () => {
    for (const headers of <Record<string, string>[]>[{ 'sec-fetch-site': 'same-origin', 'sec-fetch-mode': 'cors' }, { 'sec-fetch-site': 'none', 'sec-fetch-mode': 'navigate' }, {}]) {
      const r = await raw(url('/api/v1/jobs'), { headers });
      expect(r.status, JSON.stringify(headers)).toBe(200);
    }
  });
});
