import { request } from 'node:http';
import { connect } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';

/**
 * HTTP requests with exactly the headers given, as a browser or an attacker would send them:
 * unlike fetch, node:http lets a test set `Host` and adds no `Sec-Fetch-Mode` of its own.
 */

export interface RawAnswer {
  status: number;
  text: string;
  json: any;
  headers: Record<string, string | string[] | undefined>;
}

export interface RawRequest {
  method?: string;
  headers?: Record<string, string>;
  body?: string | Buffer;
}

export function raw(url: string, r: RawRequest = {}): Promise<RawAnswer> {
  return new Promise((resolve, reject) => {
    const headers = { ...r.headers };
    if (r.body !== undefined) headers['content-length'] = String(Buffer.byteLength(r.body));
    const req = request(url, { method: r.method ?? 'GET', headers, timeout: 30_000 }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (d) => (text += d));
      res.on('end', () => {
        let json: unknown;
        try {
          json = JSON.parse(text);
        } catch {
          json = undefined;
        }
        resolve({ status: res.statusCode ?? 0, text, json, headers: res.headers });
      });
    });
    req.on('error', reject);
    req.on('timeout', () => req.destroy(new Error(`timeout: ${r.method ?? 'GET'} ${url}`)));
    req.end(r.body);
  });
}

/** Polls `check` until it returns true; fails naming `what` after `ms`. */
export async function waitFor(what: string, check: () => Promise<boolean>, ms = 10_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(50);
  }
}

/**
 * POSTs each body on one connection, `window` of them on the way at any time (HTTP/1.1
 * pipelining: the next is written as an answer comes), and reads the answers, which come in
 * the order asked.
 */
export function pipelined(url: string, path: string, bodies: string[], window: number): Promise<{ status: number; body: string }[]> {
  const { hostname, port } = new URL(url);
  return new Promise((resolve, reject) => {
    const socket = connect(Number(port), hostname);
    let buffer = Buffer.alloc(0);
    const answers: { status: number; body: string }[] = [];
    socket.setTimeout(30_000, () => socket.destroy(new Error(`${answers.length} of ${bodies.length} answers after 30 s`)));
    socket.on('error', reject);
    const request = (b: string) => `POST ${path} HTTP/1.1\r\nHost: ${hostname}:${port}\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(b)}\r\n\r\n${b}`;
    let sent = 0;
    socket.on('connect', () => {
      sent = Math.min(window, bodies.length);
      socket.write(bodies.slice(0, sent).map(request).join(''));
    });
    socket.on('data', (chunk) => {
      buffer = Buffer.concat([buffer, chunk]);
      for (;;) {
        const end = buffer.indexOf('\r\n\r\n');
        if (end < 0) return;
        const head = buffer.subarray(0, end).toString('latin1');
        const length = Number(/content-length: *(\d+)/i.exec(head)?.[1] ?? NaN);
        if (!Number.isFinite(length)) return socket.destroy(new Error(`an answer without content-length: ${head}`));
        if (buffer.length < end + 4 + length) return;
        answers.push({ status: Number(head.split(' ')[1]), body: buffer.subarray(end + 4, end + 4 + length).toString('utf8') });
        buffer = buffer.subarray(end + 4 + length);
        if (sent < bodies.length) socket.write(request(bodies[sent++]!));
        if (answers.length === bodies.length) {
          socket.end();
          return resolve(answers);
        }
      }
    });
  });
}
