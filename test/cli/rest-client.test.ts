import { describe, expect, it } from 'vitest';
import { ClientError } from '../../client/errors.js';
import { RestClient } from '../../client/rest.js';

interface Seen {
  method: string;
  url: string;
  headers: Record<string, string>;
  body?: string;
}

function fakeFetch(answer: (req: Seen) => Response) {
  const seen: Seen[] = [];
  const impl = async (input: string | URL | Request, init?: RequestInit): Promise<Response> => {
    const req = { method: init?.method ?? 'GET', url: String(input), headers: { ...(init?.headers as Record<string, string>) }, body: init?.body as string | undefined };
    seen.push(req);
    return answer(req);
  };
  return { seen, fetch: impl as typeof fetch };
}

const json = (v: unknown, status = 200) => new Response(JSON.stringify(v), { status, headers: { 'content-type': 'application/json' } });

describe('RestClient', () => {
  it('sends JSON with its content type on every request that has a body, and the credentials on all', async () => {
    const f = fakeFetch(() => json({ id: 'j1' }));
    const rest = new RestClient({ url: 'http://node.test/', headers: { 'x-api-key': 'k' }, fetch: f.fetch });
    expect(await rest.post('/api/v1/jobs', { image: 'alpine' })).toEqual({ id: 'j1' });
    await rest.get('/api/v1/jobs');
    await rest.delete('/api/v1/jobs/j1');
    expect(f.seen.map((r) => `${r.method} ${r.url}`)).toEqual(['POST http://node.test/api/v1/jobs', 'GET http://node.test/api/v1/jobs', 'DELETE http://node.test/api/v1/jobs/j1']);
    expect(f.seen[0]).toMatchObject({ body: '{"image":"alpine"}', headers: { 'content-type': 'application/json', 'x-api-key': 'k', accept: 'application/json' } });
    expect(f.seen[1].headers['content-type']).toBeUndefined();
    expect(f.seen.every((r) => r.headers['x-api-key'] === 'k')).toBe(true);
  });

  it('turns a refusal into a ClientError with the node text and status; 408 is a timeout', async () => {
    const rest = new RestClient({ url: 'http://node.test', fetch: fakeFetch(() => json({ error: 'job j1 not found' }, 404)).fetch });
    await expect(rest.get('/api/v1/jobs/j1')).rejects.toMatchObject({ kind: 'http', status: 404, nodeError: 'job j1 not found', message: 'job j1 not found (HTTP 404)' });
    const slow = new RestClient({ url: 'http://node.test', fetch: fakeFetch(() => json({ error: 'no reply before opt.exp' }, 408)).fetch });
    await expect(slow.get('/x')).rejects.toMatchObject({ kind: 'timeout', status: 408 });
    const broken = new RestClient({ url: 'http://node.test', fetch: fakeFetch(() => new Response('<html>')).fetch });
    await expect(broken.get('/x')).rejects.toMatchObject({ kind: 'protocol', message: 'the node answered GET /x with something that is not JSON' });
  });

  it('says a node that does not answer is unreachable, naming its URL and the reason', async () => {
    const refused = Object.assign(new TypeError('fetch failed'), { cause: { code: 'ECONNREFUSED' } });
    const rest = new RestClient({ url: 'http://127.0.0.1:1', fetch: (async () => { throw refused; }) as typeof fetch });
    const err = await rest.get('/api/v1/jobs').catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ClientError);
    expect(err).toMatchObject({ kind: 'unreachable', message: 'cannot reach the node at http://127.0.0.1:1: connection refused' });
  });

  it('reads server-sent events split across chunks, skipping comments', async () => {
    const chunks = [': hi\n\nevent: log\ndata: {"a":', '1}\n\nevent: end\ndata: line1\ndata: line2\n\n'];
    const body = new ReadableStream<Uint8Array>({
      start(c) {
        for (const s of chunks) c.enqueue(new TextEncoder().encode(s));
        c.close();
      },
    });
    const f = fakeFetch(() => new Response(body, { headers: { 'content-type': 'text/event-stream' } }));
    const rest = new RestClient({ url: 'http://node.test', fetch: f.fetch });
    const events = [];
    for await (const ev of rest.events('/api/v1/jobs/j1/logs?follow=true')) events.push(ev);
    expect(events).toEqual([{ event: 'log', data: '{"a":1}' }, { event: 'end', data: 'line1\nline2' }]);
    expect(f.seen[0].headers.accept).toBe('text/event-stream');
  });

  it('an event stream that breaks off is a ClientError saying so, not fetch\'s bare "terminated"', async () => {
    let pulls = 0;
    const body = new ReadableStream<Uint8Array>({
      pull(c) {
        if (pulls++ === 0) c.enqueue(new TextEncoder().encode('event: log\ndata: {}\n\n'));
        else c.error(new TypeError('terminated', { cause: Object.assign(new Error('Body Timeout Error'), { code: 'UND_ERR_BODY_TIMEOUT' }) }));
      },
    });
    const rest = new RestClient({ url: 'http://node.test', fetch: fakeFetch(() => new Response(body)).fetch });
    const events: { event: string; data: string }[] = [];
    const failed = await (async () => {
      for await (const ev of rest.events('/api/v1/jobs/j1/logs?follow=true')) events.push(ev);
    })().catch((e: unknown) => e);
    expect(events).toEqual([{ event: 'log', data: '{}' }]);
    expect(failed).toBeInstanceOf(ClientError);
    expect((failed as ClientError).kind).toBe('protocol');
    expect((failed as ClientError).message).toBe("the event stream from http://node.test/api/v1/jobs/j1/logs?follow=true broke off: nothing came for 300 s (Node's fetch gives up on a quiet answer then)");
  });

  it('a reader that stops early lets the stream go', async () => {
    let cancelled = false;
    const body = new ReadableStream<Uint8Array>({
      pull(c) {
        c.enqueue(new TextEncoder().encode('event: log\ndata: {}\n\n'));
      },
      cancel() {
        cancelled = true;
      },
    });
    const rest = new RestClient({ url: 'http://node.test', fetch: fakeFetch(() => new Response(body)).fetch });
    for await (const ev of rest.events('/x')) {
      expect(ev.event).toBe('log');
      break;
    }
    expect(cancelled).toBe(true);
  });
});
