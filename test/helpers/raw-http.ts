import { request } from 'node:http';
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
