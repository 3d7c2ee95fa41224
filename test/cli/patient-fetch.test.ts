/**
 * `dms`'s fetch (cli/patient-fetch.ts): fetch's interface over node:http, without Node's fetch's
 * 300 s bounds on an answer (its headers, a quiet body), which cut `dms jobs get` of an output
 * the node took longer to fetch (found by a probe: 'UND_ERR_HEADERS_TIMEOUT' at 301 s). That
 * bound shows only after 300 s, longer than a test may wait; these cases check that it is fetch
 * otherwise, as RestClient uses it, against a real server on 127.0.0.1.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ClientError } from '../../client/errors.js';
import { RestClient } from '../../client/rest.js';
import { patientFetch } from '../../cli/patient-fetch.js';

let server: Server;
let url: string;
const seen: { method: string; headers: Record<string, string | string[] | undefined>; body: string }[] = [];

beforeAll(async () => {
  server = createServer((req, res) => {
    let body = '';
    req.on('data', (c) => (body += c));
    req.on('end', () => {
      seen.push({ method: req.method!, headers: req.headers, body });
      if (req.url === '/json') return void res.writeHead(201, { 'content-type': 'application/json', 'x-two': ['a', 'b'] }).end('{"ok":true}');
      if (req.url === '/refused') return void res.writeHead(409, { 'content-type': 'application/json' }).end('{"error":"no"}');
      if (req.url === '/empty') return void res.writeHead(204).end();
      if (req.url === '/slow-body') {
        res.writeHead(200, { 'content-type': 'text/event-stream' });
        res.write('event: a\ndata: 1\n\n');
        setTimeout(() => res.end('event: b\ndata: 2\n\n'), 300);
        return;
      }
      if (req.url === '/never') return; // answers nothing
      res.writeHead(404).end();
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});
afterAll(() => {
  server.closeAllConnections();
  server.close();
});

describe('patientFetch', () => {
  it('sends the method, headers and string body, and answers status, headers and body as fetch does', async () => {
    const res = await patientFetch(`${url}/json`, { method: 'POST', headers: { 'content-type': 'application/json', 'x-api-key': 'k' }, body: '{"a":1}' });
    expect(res.status).toBe(201);
    expect(res.ok).toBe(true);
    expect(res.headers.get('content-type')).toBe('application/json');
    expect(res.headers.get('x-two')).toBe('a, b');
    expect(await res.json()).toEqual({ ok: true });
    const req = seen.at(-1)!;
    expect(req.method).toBe('POST');
    expect(req.headers['x-api-key']).toBe('k');
    expect(req.body).toBe('{"a":1}');
  });

  it('answers a 204 with no body', async () => {
    const res = await patientFetch(`${url}/empty`);
    expect(res.status).toBe(204);
    expect(res.body).toBeNull();
  });

  it('streams a body as it comes: RestClient reads events from it, and a refusal as the node worded it', async () => {
    const rest = new RestClient({ url, fetch: patientFetch });
    const events = [];
    for await (const ev of rest.events('/slow-body')) events.push(ev);
    expect(events).toEqual([
      { event: 'a', data: '1' },
      { event: 'b', data: '2' },
    ]);
    const refused = await rest.get('/refused').catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(ClientError);
    expect((refused as ClientError).message).toBe('no (HTTP 409)');
  });

  it('a node that does not answer is unreachable, naming why, as with fetch', async () => {
    const closed = createServer();
    await new Promise<void>((r) => closed.listen(0, '127.0.0.1', () => r()));
    const port = (closed.address() as AddressInfo).port;
    await new Promise<void>((r) => closed.close(() => r()));
    const rest = new RestClient({ url: `http://127.0.0.1:${port}`, fetch: patientFetch });
    const failed = await rest.get('/x').catch((e: unknown) => e);
    expect((failed as ClientError).kind).toBe('unreachable');
    expect((failed as ClientError).message).toBe(`cannot reach the node at http://127.0.0.1:${port}: connection refused`);
  });

  it('a caller’s deadline still ends the wait', async () => {
    const rest = new RestClient({ url, fetch: patientFetch });
    const started = Date.now();
    const failed = await rest.get('/never', { deadlineMs: 300 }).catch((e: unknown) => e);
    expect((failed as ClientError).kind).toBe('timeout');
    expect(Date.now() - started).toBeLessThan(5_000);
  });
});
