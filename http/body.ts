import { isUtf8 } from 'node:buffer';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { H3Event } from 'h3';
import { DmsError } from '../runtime/errors.js';

const tooLarge = (limit: number) => new DmsError('too_large', `request body is larger than the limit of ${limit} bytes`);

/** The body as text. Bytes that are not UTF-8 are refused: decoded, each became U+FFFD, and a job was stored under a name its client never sent. */
function utf8(body: Buffer): string {
  if (!isUtf8(body)) throw new DmsError('invalid', 'request body is not UTF-8');
  return body.toString('utf8');
}

interface NodeContext {
  req: IncomingMessage;
  res?: ServerResponse;
}

// Under node:http, reading the IncomingMessage directly skips the web-stream adapter, which
// costs more per request than the rest of an invoke's parsing.
const nodeContext = (event: H3Event): NodeContext | undefined => event.runtime?.node as NodeContext | undefined;

/** Reads the request body as UTF-8 text, refusing (413) as soon as it passes `limit` bytes, and (400) bytes that are not UTF-8. */
export async function readBodyText(event: H3Event, limit: number): Promise<string> {
  const declared = Number(event.req.headers.get('content-length') ?? NaN);
  if (declared > limit) throw tooLarge(limit);
  const node = nodeContext(event);
  return node ? readNode(node.req, limit) : readWeb(event, limit);
}

function readNode(req: IncomingMessage, limit: number): Promise<string> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    const onData = (chunk: Buffer) => {
      size += chunk.length;
      if (size > limit) {
        req.off('data', onData);
        req.resume();
        reject(tooLarge(limit));
        return;
      }
      chunks.push(chunk);
    };
    req.on('data', onData);
    req.once('end', () => {
      try {
        resolve(utf8(chunks.length === 1 ? chunks[0] : Buffer.concat(chunks, size)));
      } catch (e) {
        reject(e);
      }
    });
    req.once('error', (e) => reject(new DmsError('invalid', `request body could not be read (${e.message})`)));
  });
}

async function readWeb(event: H3Event, limit: number): Promise<string> {
  const body = event.req.body;
  if (!body) return '';
  const chunks: Uint8Array[] = [];
  let size = 0;
  const reader = body.getReader();
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    size += value.byteLength;
    if (size > limit) {
      await reader.cancel().catch(() => {});
      throw tooLarge(limit);
    }
    chunks.push(value);
  }
  return utf8(Buffer.concat(chunks, size));
}

/** Calls `onGone` if the client goes away before its response is written. */
export function onClientGone(event: H3Event, onGone: () => void): () => void {
  const node = nodeContext(event);
  if (node?.res) {
    const res = node.res;
    const listener = () => {
      if (!res.writableEnded) onGone();
    };
    res.once('close', listener);
    return () => res.off('close', listener);
  }
  const signal = event.req.signal;
  signal.addEventListener('abort', onGone, { once: true });
  return () => signal.removeEventListener('abort', onGone);
}

/**
 * `e` as what it is when the client closed the request before its body ended (an abandoned
 * upload, one cut at node:http's request timeout): node:http's `aborted` error, which the route
 * took for a failure of the node (logged as an error, answered 500 to nobody).
 */
export function asClientGone(event: H3Event, e: unknown): unknown {
  const req = nodeContext(event)?.req;
  if (req && !req.complete && (req.destroyed || req.socket?.destroyed)) return new DmsError('invalid', 'the client closed the request before its body ended');
  return e;
}
