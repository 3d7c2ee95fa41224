/**
 * What a request over node:http's header bound is told (http/header-overflow.ts), from the read
 * the parser refused. The real node's answers are in test/rest/http-edges.test.ts; these are the
 * reads a socket test cannot make arrive on cue.
 */
import { describe, expect, it } from 'vitest';
import { overflowAnswer } from '../../http/header-overflow.js';

const read = (text: string) => Buffer.from(text, 'latin1');

describe('overflowAnswer', () => {
  it('names the URL when the read is a request line that has not ended', () => {
    const a = overflowAnswer(read(`POST /api/v1/jobs?x=${'a'.repeat(17_000)}`));
    expect(a.status).toBe(414);
    expect(a.message).toMatch(/at least 16\.6 KiB of it came, starting "\/api\/v1\/jobs\?x=a+…"$/);
  });

  it('names the longest header, lower-cased, when a header is longer than the URL', () => {
    const a = overflowAnswer(read(`GET /health HTTP/1.1\r\nHost: x\r\nCookie: ${'c'.repeat(17_000)}\r\nAccept: */*\r\n\r\n`));
    expect(a).toEqual({ status: 431, message: 'the headers are larger than this node reads (16 KiB, with the request line); the longest, "cookie", is 16.6 KiB' });
  });

  it('says "or more" of a header whose end has not come', () => {
    expect(overflowAnswer(read(`GET /health HTTP/1.1\r\nAuthorization: Bearer ${'t'.repeat(17_000)}`)).message).toMatch(/"authorization", is 16\.6 KiB or more$/);
  });

  it('names neither when the read continues a request, is empty, or holds a whole request within the bound first', () => {
    const neither = { status: 431, message: 'request line and headers are larger than this node reads (16 KiB in all)' };
    expect(overflowAnswer(undefined)).toEqual(neither);
    expect(overflowAnswer(Buffer.alloc(0))).toEqual(neither);
    expect(overflowAnswer(read(`${'h'.repeat(1000)}\r\nX-2: ${'h'.repeat(1000)}`))).toEqual(neither);
    // Pipelined: the first request is whole and small; the one refused follows it.
    expect(overflowAnswer(read(`GET / HTTP/1.1\r\nHost: x\r\n\r\nGET /${'a'.repeat(17_000)}`))).toEqual(neither);
  });

  it('keeps what it quotes short, whatever bytes came', () => {
    const a = overflowAnswer(read(`GET /${'\u00ff'.repeat(17_000)} HTTP/1.1\r\n\r\n`));
    expect(a.status).toBe(414);
    expect(a.message.length).toBeLessThan(200);
  });
});
