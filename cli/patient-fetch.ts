/**
 * The fetch `dms` talks to its node with: Node's own fetch's interface over node:http, without
 * its bound on how long an answer may take. Node 20's fetch (undici) gives up on an answer whose
 * headers take 300 s, and on a body that brings nothing for 300 s: `dms jobs get` of an output
 * the node spends longer fetching from its provider (it answers once every block is held), or
 * `dms actor invoke --timeout 600`, failed at 300 s with "cannot reach the node …:
 * UND_ERR_HEADERS_TIMEOUT". The node bounds its own waits (a message's `opt.exp`, a fetch's
 * stall time); a caller that wants less passes a signal, as RestClient's deadlines do.
 *
 * Only what RestClient and DmsClient ask of a fetch: a method, headers as a plain object, a
 * string body, a signal; the node never redirects nor compresses. A failure to connect rejects
 * as fetch's does (a TypeError whose `cause` is the socket's error), so it reads the same
 * (client/rest.ts networkReason).
 */
import { request as httpRequest, type IncomingMessage } from 'node:http';
import { request as httpsRequest } from 'node:https';
import { Readable } from 'node:stream';

/** Statuses whose answer has no body: a Response refuses to be made with one. */
const NO_BODY = new Set([101, 204, 205, 304]);

export const patientFetch: typeof fetch = (input, init = {}) => {
  const url = new URL(input instanceof Request ? input.url : String(input));
  const send = url.protocol === 'https:' ? httpsRequest : httpRequest;
  const headers: Record<string, string> = {};
  new Headers(init.headers).forEach((value, name) => (headers[name] = value));
  const body = init.body;
  if (body !== undefined && body !== null && typeof body !== 'string') {
    return Promise.reject(new TypeError('patientFetch sends a string body only'));
  }
  return new Promise<Response>((resolve, reject) => {
    const req = send(url, { method: init.method ?? 'GET', headers, signal: init.signal ?? undefined });
    req.once('response', (res: IncomingMessage) => {
      const status = res.statusCode ?? 0;
      const answered = new Headers();
      for (const [name, value] of Object.entries(res.headers)) {
        if (value !== undefined) answered.set(name, Array.isArray(value) ? value.join(', ') : value);
      }
      const empty = NO_BODY.has(status) || init.method === 'HEAD';
      if (empty) res.resume();
      resolve(new Response(empty ? null : (Readable.toWeb(res) as ReadableStream<Uint8Array>), { status, statusText: res.statusMessage, headers: answered }));
    });
    req.once('error', (e) => reject(new TypeError('fetch failed', { cause: e })));
    req.end(body ?? undefined);
  });
};
