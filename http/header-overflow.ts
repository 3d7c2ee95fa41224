/**
 * What a request too large for node:http's header parser was too large in. The parser says only
 * that its bound was passed (HPE_HEADER_OVERFLOW); a client told "request line and headers are
 * larger than this node reads" did not know whether to shorten its URL (a query of thousands of
 * ids) or a header (a capability chain in a bearer token, a browser's cookies). The bytes of the
 * read that passed the bound usually tell: a read that starts a request and holds no line end is
 * its URL (414); otherwise the longer of its URL and its longest header is named (414 or 431).
 * A read that continues a request sent in many small writes says neither, and the answer says both.
 */
import { formatBytes } from '../runtime/bytes.js';

/** node:http's bound on a request line and its headers, together (its default, `--max-http-header-size`). */
export const HEADER_BYTES = 16 * 1024;

export interface OverflowAnswer {
  status: 414 | 431;
  message: string;
}

const bound = formatBytes(HEADER_BYTES);
/** A request line's start: a method token, one space, then the target. */
const REQUEST_START = /^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,32} \S/;
const shown = (s: string) => JSON.stringify(s.length > 60 ? `${s.slice(0, 60)}…` : s);

/** The answer to a request whose line and headers passed HEADER_BYTES, from `raw`, the read the parser refused. */
export function overflowAnswer(raw: Buffer | undefined): OverflowAnswer {
  const unknown: OverflowAnswer = { status: 431, message: `request line and headers are larger than this node reads (${bound} in all)` };
  if (!raw || raw.length === 0) return unknown;
  // Latin-1 maps each byte to one character, so lengths below are bytes.
  const text = raw.toString('latin1');
  if (!REQUEST_START.test(text)) return unknown;
  const lineEnd = text.indexOf('\n');
  const line = lineEnd === -1 ? text : text.slice(0, lineEnd).replace(/\r$/, '');
  // The target, without the method before it and the version after it (when the line ended).
  const target = line.slice(line.indexOf(' ') + 1).replace(/ HTTP\/\d\.\d$/, '');
  let longest = { name: '', bytes: 0 };
  let headEnd = -1;
  if (lineEnd !== -1) {
    const head = text.slice(lineEnd + 1);
    headEnd = head.indexOf('\r\n\r\n');
    for (const field of (headEnd === -1 ? head : head.slice(0, headEnd)).split('\n')) {
      const bytes = field.replace(/\r$/, '').length;
      if (bytes > longest.bytes) longest = { name: field.slice(0, Math.max(0, field.indexOf(':'))) || field.slice(0, 40), bytes };
    }
  }
  // A whole head within the bound is a request before the one refused, on a connection that sends many at once.
  if (headEnd !== -1 && lineEnd + 1 + headEnd + 4 <= HEADER_BYTES) return unknown;
  // Whichever is the longer is what passed the bound: the headers of a request are rarely many.
  if (target.length >= longest.bytes) {
    const size = lineEnd === -1 ? `at least ${formatBytes(target.length)} of it came` : `it is ${formatBytes(target.length)}`;
    return { status: 414, message: `the URL is longer than this node reads (${bound}, with the headers): ${size}, starting ${shown(target)}` };
  }
  return {
    status: 431,
    message: `the headers are larger than this node reads (${bound}, with the request line); the longest, ${shown(longest.name.toLowerCase())}, is ${formatBytes(longest.bytes)}${headEnd === -1 ? ' or more' : ''}`,
  };
}
