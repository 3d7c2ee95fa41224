import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { newCaller, rootOf, wire } from '../helpers/envelopes.js';
import { type NodeProcess, removeHome, startNode } from '../helpers/node.js';
import { raw, waitFor } from '../helpers/raw-http.js';

/**
 * A web page the operator happens to visit attacks the node on 127.0.0.1: simple requests
 * (text/plain, no preflight), cross-origin fetches, DNS rebinding (a page whose own name now
 * resolves to 127.0.0.1, so the browser sends `Host: attacker.example`), and unsigned
 * envelopes the node would sign as its operator. Every attack is refused before it has any
 * effect; local tools (curl, node fetch, the dms CLI) keep working.
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

describe('Origin', () => {
  it('refuses a request from an origin not in rest.cors.origins with 403, before it has any effect', async () => {
    const r = await raw(url('/api/v1/jobs'), { method: 'POST', headers: { 'content-type': 'application/json', origin: EVIL }, body: JOB });
    expect(r.status).toBe(403);
    expect(r.json.error).toBe(`origin ${EVIL} is not allowed (rest.cors.origins)`);
    const send = await raw(url('/api/v1/actor/send'), { method: 'POST', headers: { 'content-type': 'text/plain', origin: EVIL }, body: rename('pwned') });
    expect(send.status).toBe(403);
    // Reads are refused too: the page learns nothing, even where CORS headers would hide the answer.
    const read = await raw(url('/api/v1/actor/handle'), { headers: { origin: 'null' } });
    expect(read.status).toBe(403);
    await healthy();
    expect(await jobCount()).toBe(0);
    expect(await deviceName()).not.toBe('pwned');
  });

  it('refuses the preflight of a disallowed origin, and answers an allowed one', async () => {
    const preflight = (origin: string) =>
      raw(url('/api/v1/jobs'), {
        method: 'OPTIONS',
        headers: { origin, 'access-control-request-method': 'POST', 'access-control-request-headers': 'content-type' },
      });
    const evil = await preflight(EVIL);
    expect(evil.status).toBe(403);
    expect(evil.headers['access-control-allow-origin']).toBeUndefined();
    const ok = await preflight(ALLOWED_ORIGIN);
    expect(ok.status).toBe(204);
    expect(ok.headers['access-control-allow-origin']).toBe(ALLOWED_ORIGIN);
  });

  it('lets an allowed origin read, with CORS headers', async () => {
    const r = await raw(url('/api/v1/actor/handle'), { headers: { origin: ALLOWED_ORIGIN } });
    expect(r.status).toBe(200);
    expect(r.headers['access-control-allow-origin']).toBe(ALLOWED_ORIGIN);
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
  it('are refused with 403 even from an allowed origin, and the device keeps its name', async () => {
    const r = await raw(url('/api/v1/actor/send'), { method: 'POST', headers: { 'content-type': 'application/json', origin: ALLOWED_ORIGIN }, body: rename('pwned') });
    expect(r.status).toBe(403);
    expect(r.json.error).toMatch(/unsigned envelope from a browser.*sign it.*dms CLI/);
    for (const headers of <Record<string, string>[]>[{ 'sec-fetch-site': 'cross-site', 'sec-fetch-mode': 'no-cors' }, { 'sec-fetch-site': 'same-origin' }, { 'sec-fetch-mode': 'navigate' }]) {
      const inv = await raw(url('/api/v1/actor/invoke'), { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: unsignedHello() });
      expect(inv.status, JSON.stringify(headers)).toBe(403);
    }
    await healthy();
    expect(await deviceName()).not.toBe('pwned');
  });

  it('a signed envelope from an allowed origin is fine', async () => {
    const r = await raw(url('/api/v1/actor/invoke'), {
      method: 'POST',
      headers: { 'content-type': 'application/json', origin: ALLOWED_ORIGIN },
      body: wire(newCaller(), { to: rootOf(node.peerId), be: '/public/hello', cont: '/private/r' }),
    });
    expect(r.status, r.text).toBe(200);
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
