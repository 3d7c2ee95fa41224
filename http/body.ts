import type { H3Event } from 'h3';
import { DmsError } from '../runtime/errors.js';

const tooLarge = (limit: number) => new DmsError('too_large', `request body is larger than the limit of ${limit} bytes`);

/** Reads the request body as UTF-8 text, refusing (413) as soon as it passes `limit` bytes. */
export async function readBodyText(event: H3Event, limit: number): Promise<string> {
  const declared = Number(event.req.headers.get('content-length') ?? NaN);
  if (declared > limit) throw tooLarge(limit);
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
  return Buffer.concat(chunks, size).toString('utf8');
}
