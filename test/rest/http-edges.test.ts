/**
 * The REST port against a client that writes HTTP by hand. Defects found by probing a running node
 * with raw sockets:
 * - pipelined requests were all handled at once, however many one connection sent: ten thousand
 *   `GET /api/v1/jobs?limit=1000` from three connections took the node to 1.4 GB, and it kept
 *   working for 40 s after the clients had gone;
 * - the request target was resolved before routing: `…/outputs/%2e%2e` answered the job itself,
 *   and an absolute-form target (`GET http://evil.example/…`) passed the Host check;
 * - `Transfer-Encoding: gzip, chunked` was read as if the body were not compressed;
 * - bytes that are not UTF-8 in a JSON body became U+FFFD and were stored;
 * - HTTP that node:http cannot parse was answered with a bare 400 and no word of what was wrong;
 *   one over the header bound with a 431 that did not say whether its URL or a header was long;
 * - an envelope nested 100,000 deep was refused with the engine's "Maximum call stack size
 *   exceeded", and one holding a `__proto__` key was accepted.
 */
import { copyFileSync } from 'node:fs';
import { connect } from 'node:net';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { newCaller, rootOf, wire } from '../helpers/envelopes.js';
import { type LocalNode, startLocalNode } from '../helpers/local-node.js';
import { removeHome, tempHome } from '../helpers/node.js';

const MAX_CONNECTIONS = 12;
let node: LocalNode;
let host: string;
let port: number;
beforeAll(async () => {
  const home = tempHome();
  copyFileSync(new URL('../fixtures/plugins/slow.mjs', import.meta.url), join(home, 'slow.mjs'));
  node = await startLocalNode({ home, config: { network: { enabled: false }, plugins: { modules: ['./slow.mjs'] }, rest: { max_connections: MAX_CONNECTIONS } } });
  const url = new URL(node.url);
  host = url.host;
  port = Number(url.port);
}, 30_000);
afterAll(async () => {
  await node?.stop();
  if (node) removeHome(node.home);
});

/** Writes `bytes` on a new connection and reads until the node closes it, `enough` says so, or `forMs` passes. */
function exchange(bytes: string | Buffer, forMs = 5_000, enough: (text: string) => boolean = () => false): Promise<{ text: string; closed: boolean; ms: number }> {
  return new Promise((resolve) => {
    const t0 = Date.now();
    const socket = connect(port, '127.0.0.1', () => socket.write(bytes));
    let text = '';
    const done = (closed: boolean) => {
      clearTimeout(timer);
      socket.destroy();
      resolve({ text, closed, ms: Date.now() - t0 });
    };
    const timer = setTimeout(() => done(false), forMs);
    socket.on('data', (d) => {
      text += d.toString('latin1');
      if (enough(text)) done(false);
    });
    socket.on('close', () => done(true));
    socket.on('error', () => undefined);
  });
}

// An answer's body ends without a line break: the next status line follows it on the same line.
const statuses = (text: string) => [...text.matchAll(/HTTP\/1\.1 (\d{3}) /g)].map((m) => Number(m[1]));
/** The JSON error of the first answer in `text` (sent whole or chunked). */
const errorOf = (text: string): string | undefined => {
  const found = /\{"error":"(?:[^"\\]|\\.)*"\}/.exec(text);
  return found ? (JSON.parse(found[0]) as { error: string }).error : undefined;
};
/** Whether `text` holds the first answer whole: its head, and a body of its length or its last chunk. */
const answered = (text: string): boolean => {
  const end = text.indexOf('\r\n\r\n');
  if (end < 0) return false;
  const length = /content-length: *(\d+)/i.exec(text.slice(0, end));
  return length ? text.length >= end + 4 + Number(length[1]) : text.includes('\r\n0\r\n\r\n', end);
};
const get = (target: string) => `GET ${target} HTTP/1.1\r\nHost: ${host}\r\n\r\n`;
const postJson = (target: string, body: Buffer | string) =>
  Buffer.concat([Buffer.from(`POST ${target} HTTP/1.1\r\nHost: ${host}\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n`), Buffer.from(body)]);

describe('pipelined requests', () => {
  it('are handled at most 8 at a time per connection, and all answered in order', { timeout: 20_000 }, async () => {
    const caller = { ...newCaller(), key: node.operator() };
    const root = { ...rootOf(''), addr: { host: '', inbox: 'slow' } };
    const bodies = Array.from({ length: 16 }, (_, i) => wire(caller, { to: root, be: '/plugin/slow/wait', payload: { ms: 1_000 }, cont: `/private/p/${i}`, ttlMs: 15_000 }));
    const { text, ms } = await exchange(Buffer.concat(bodies.map((b) => postJson('/api/v1/actor/invoke', b))), 10_000, (t) => statuses(t).length === 16);
    expect(statuses(text)).toEqual(Array(16).fill(200));
    // Sixteen waits of a second each, eight at a time: two turns. All at once took one.
    expect(ms).toBeGreaterThanOrEqual(1_900);
  });

  it('closes a connection that has more than 72 waiting, and serves the next', async () => {
    const { text, closed } = await exchange(get('/health').repeat(200));
    expect(closed).toBe(true);
    expect(statuses(text).length).toBeLessThan(200);
    expect((await fetch(`${node.url}/health`)).status).toBe(200);
  });
});

describe('connections past rest.max_connections', () => {
  /** A connection sending a JSON body of 1,000 bytes a byte every `everyMs`. */
  const trickle = (everyMs: number) => {
    const socket = connect(port, '127.0.0.1', () => socket.write(`POST /api/v1/jobs HTTP/1.1\r\nHost: ${host}\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{`));
    const timer = setInterval(() => socket.writable && socket.write(' '), everyMs);
    socket.on('error', () => undefined);
    socket.on('close', () => clearInterval(timer));
    return socket;
  };

  it('close the slowest sender for a new one: a client trickling bodies on every slot keeps nobody out', async () => {
    const slow = Array.from({ length: MAX_CONNECTIONS }, () => trickle(300));
    try {
      await new Promise((r) => setTimeout(r, 500));
      for (let i = 0; i < 3; i++) expect((await fetch(`${node.url}/health`)).status).toBe(200);
      expect(slow.filter((s) => s.destroyed).length).toBeGreaterThanOrEqual(1);
    } finally {
      for (const s of slow) s.destroy();
    }
  });

  it('never close one the node is answering: past the bound with every slot answered, the new one goes', { timeout: 20_000 }, async () => {
    const caller = { ...newCaller(), key: node.operator() };
    const root = { ...rootOf(''), addr: { host: '', inbox: 'slow' } };
    const waits = Array.from({ length: MAX_CONNECTIONS }, (_, i) =>
      exchange(postJson('/api/v1/actor/invoke', wire(caller, { to: root, be: '/plugin/slow/wait', payload: { ms: 2_000 }, cont: `/private/w/${i}`, ttlMs: 15_000 })), 10_000, answered),
    );
    await new Promise((r) => setTimeout(r, 700));
    const refused = await fetch(`${node.url}/health`).then(
      () => false,
      () => true,
    );
    const answers = await Promise.all(waits);
    expect(answers.map((a) => statuses(a.text)[0])).toEqual(Array(MAX_CONNECTIONS).fill(200));
    expect(refused).toBe(true);
  });
});

describe('the request target', () => {
  const job = '00000000-0000-4000-8000-000000000001';
  it.each([
    [`/api/v1/jobs/${job}/outputs/%2e%2e`, /dot-segment/],
    [`/api/v1/jobs/${job}/outputs/%2E.`, /dot-segment/],
    ['/api/v1/jobs/..', /dot-segment/],
    ['/api/v1/./health', /dot-segment/],
    ['/api/v1\\jobs', /backslash/],
    ['/api/v1/jobs/%ZZ', /%ZZ.*not a percent-encoded byte/],
    ['/api/v1/jobs/%ED%A0%80', /does not decode to UTF-8/],
    ['http://evil.example/api/v1/jobs', /not a path/],
    // URLSearchParams reads these as something else: %ZZ as it is, %E9 (latin-1) as U+FFFD.
    ['/api/v1/jobs?status=%ZZ', /query parameter "status=%ZZ" holds "%ZZ", which is not a percent-encoded byte/],
    ['/api/v1/jobs?name=caf%E9', /query parameter "name=caf%E9" does not decode to UTF-8/],
  ])('%s is refused with 400 naming what is wrong', async (target, message) => {
    const { text } = await exchange(get(target), 3_000, answered);
    expect(statuses(text)[0], text).toBe(400);
    expect(errorOf(text)).toMatch(message);
  });
});

describe('request bodies', () => {
  it('refuses a transfer coding other than chunked (415), as it refuses a content coding', async () => {
    const { text } = await exchange(`POST /api/v1/jobs HTTP/1.1\r\nHost: ${host}\r\nContent-Type: application/json\r\nTransfer-Encoding: gzip, chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n`, 3_000, answered);
    expect(statuses(text)[0], text).toBe(415);
    expect(errorOf(text)).toMatch(/Transfer-Encoding gzip, chunked is not accepted/);
  });

  it('refuses a JSON body that is not UTF-8', async () => {
    const spec = Buffer.concat([Buffer.from('{"name":"'), Buffer.from([0xff, 0xfe, 0xc0, 0xae]), Buffer.from('","image":"busybox"}')]);
    const { text } = await exchange(postJson('/api/v1/jobs', spec), 3_000, answered);
    expect(statuses(text)[0], text).toBe(400);
    expect(errorOf(text)).toMatch(/^request body is not UTF-8$/);
  });

  it('takes an upload its client abandons for what it is, not a failure of the node', async () => {
    const { closed } = await exchange(
      `POST /api/v1/blobs HTTP/1.1\r\nHost: ${host}\r\nContent-Type: application/octet-stream\r\nContent-Length: 100000\r\n\r\n${'x'.repeat(1000)}`,
      300,
    );
    expect(closed).toBe(false); // the client went first
    await new Promise((r) => setTimeout(r, 300));
    const lines = node.logs().split('\n').filter((l) => l.includes('/api/v1/blobs'));
    expect(lines.filter((l) => l.includes('"level":50')), lines.join('\n')).toEqual([]);
  });

  it('answers HTTP it cannot parse with a 400 that says what it could not', async () => {
    const cases = [
      `POST /api/v1/jobs HTTP/1.1\r\nHost: ${host}\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{}`,
      `POST /api/v1/jobs HTTP/1.1\r\nHost: ${host}\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n{}`,
      `GET /health HTTP/1.1\r\nHost: ${host}\r\nX-Bad\u0001: 1\r\n\r\n`,
    ];
    for (const bytes of cases) {
      const { text } = await exchange(bytes, 3_000);
      expect(statuses(text)[0], text).toBe(400);
      expect(errorOf(text)).toMatch(/^malformed HTTP request: \S/);
    }
  });

  it('says whether a request over the header bound was too long in its URL or in a header', async () => {
    const url = await exchange(`GET /api/v1/jobs?ids=${'a'.repeat(20_000)} HTTP/1.1\r\nHost: ${host}\r\n\r\n`, 3_000);
    expect(statuses(url.text)[0], url.text).toBe(414);
    expect(errorOf(url.text)).toMatch(/^the URL is longer than this node reads \(16 KiB, with the headers\): it is 19\.\d KiB, starting "\/api\/v1\/jobs\?ids=aaa/);
    // Its line not yet ended: what came is all that can be said.
    const unended = await exchange(`GET /api/v1/jobs?ids=${'a'.repeat(20_000)}`, 3_000);
    expect(statuses(unended.text)[0], unended.text).toBe(414);
    expect(errorOf(unended.text)).toMatch(/: at least 19\.\d KiB of it came, starting "\/api\/v1\/jobs\?ids=aaa/);
    const header = await exchange(`GET /health HTTP/1.1\r\nHost: ${host}\r\nX-Dms-Grant: ${'g'.repeat(20_000)}\r\n\r\n`, 3_000);
    expect(statuses(header.text)[0], header.text).toBe(431);
    expect(errorOf(header.text)).toMatch(/^the headers are larger than this node reads \(16 KiB, with the request line\); the longest, "x-dms-grant", is 19\.\d KiB$/);
    expect(header.closed).toBe(true);
  });

  it('says it cannot tell which when the request came in many small writes', async () => {
    const text = await new Promise<string>((resolve) => {
      let got = '';
      const socket = connect(port, '127.0.0.1', async () => {
        socket.write(`GET /health HTTP/1.1\r\nHost: ${host}\r\n`);
        for (let i = 0; i < 40 && !socket.destroyed; i++) {
          socket.write(`X-${i}: ${'h'.repeat(1_000)}\r\n`);
          await new Promise((r) => setTimeout(r, 2));
        }
      });
      socket.on('data', (d) => (got += d.toString('latin1')));
      socket.on('close', () => resolve(got));
      socket.on('error', () => undefined);
    });
    expect(statuses(text)[0], text).toBe(431);
    expect(errorOf(text)).toBe('request line and headers are larger than this node reads (16 KiB in all)');
  });
});

describe('envelopes over REST', () => {
  it('refuses one nested too deeply, in the house words, not the engine', async () => {
    const { text } = await exchange(postJson('/api/v1/actor/invoke', '['.repeat(100_000) + ']'.repeat(100_000)), 5_000, answered);
    expect(statuses(text)[0], text).toBe(400);
    expect(errorOf(text)).not.toMatch(/call stack/);
    expect(errorOf(text)).toMatch(/nested/);
  });

  it('refuses one holding a key named __proto__, as every other JSON body', async () => {
    const caller = { ...newCaller(), key: node.operator() };
    const body = wire(caller, { to: rootOf(''), be: '/public/hello', cont: '/private/r' }).replace('"opt":{', '"opt":{"__proto__":{"topic":"x"},');
    const { text } = await exchange(postJson('/api/v1/actor/invoke', body), 3_000, answered);
    expect(statuses(text)[0], text).toBe(400);
    expect(errorOf(text)).toMatch(/__proto__/);
  });
});
