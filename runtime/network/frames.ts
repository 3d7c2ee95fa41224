import { Uint8ArrayList } from 'uint8arraylist';
import { DmsError } from '../errors.js';

/**
 * Unicast framing (README "Network"): each envelope is its UTF-8 JSON preceded by
 * its byte length as an unsigned varint, so one stream carries any number of envelopes.
 */

/** Byte length of the UTF-8 encoding of `text`, without encoding it. */
export const utf8Length = (text: string): number => Buffer.byteLength(text, 'utf8');

/** One frame holding `text`, encoded straight into its final buffer (no intermediate copy). */
export function encodeFrame(text: string, byteLength: number = utf8Length(text)): Buffer {
  const frame = Buffer.allocUnsafe(varintLength(byteLength) + byteLength);
  frame.write(text, writeVarint(frame, byteLength), 'utf8');
  return frame;
}

/** One frame holding `parts` one after another (binary protocols: the block exchange). */
export function encodeBytesFrame(...parts: Uint8Array[]): Buffer {
  const length = parts.reduce((sum, p) => sum + p.length, 0);
  const frame = Buffer.allocUnsafe(varintLength(length) + length);
  let offset = writeVarint(frame, length);
  for (const part of parts) {
    frame.set(part, offset);
    offset += part.length;
  }
  return frame;
}

/**
 * The start of a frame whose last `bodyLength` bytes are sent apart (a block as it was read):
 * the length prefix of the whole frame, then `head`.
 */
export function encodeFrameStart(head: Uint8Array, bodyLength: number): Buffer {
  const length = head.length + bodyLength;
  const start = Buffer.allocUnsafe(varintLength(length) + head.length);
  start.set(head, writeVarint(start, length));
  return start;
}

/** Writes `n` as an unsigned varint at the start of `buf`; returns the offset after it. */
function writeVarint(buf: Buffer, n: number): number {
  let offset = 0;
  while (n >= 0x80) {
    buf[offset++] = (n & 0x7f) | 0x80;
    n = Math.floor(n / 0x80);
  }
  buf[offset++] = n;
  return offset;
}

function varintLength(n: number): number {
  let bytes = 1;
  while (n >= 0x80) {
    n = Math.floor(n / 0x80);
    bytes++;
  }
  return bytes;
}

/**
 * A decoder for one inbound stream. It throws as soon as a length prefix announces more than
 * `maxFrameBytes`, before the frame's bytes arrive, and as soon as a prefix runs longer than
 * such a length needs or is not minimally encoded (the multiformats unsigned varint). It gets no
 * separate buffer cap: what it holds is at most one partial frame plus one read from the
 * stream, and the muxer's receive window already bounds a read, so a cap would only reject
 * reads the muxer coalesced. That holds only because a prefix cannot stay incomplete: the
 * library's own varint reader threw RangeError past eight continuation bytes, which the
 * decoder takes for "not all here yet", so a peer that sent 0xff eight times had every byte
 * after them kept (1 GiB on one stream grew a node by 780 MB).
 */
export class FrameDecoder {
  private readonly buffer = new Uint8ArrayList();
  private readonly longest: number;

  constructor(private readonly maxFrameBytes: number) {
    this.longest = varintLength(maxFrameBytes);
  }

  /** Bytes of a frame not yet whole: what the stream still owes. */
  get buffered(): number {
    return this.buffer.byteLength;
  }

  /**
   * The frames `chunk` completes, in order; an empty frame carries nothing and is skipped. A
   * stream hands over bytes or a list of them (libp2p's own uint8arraylist, another major
   * version than this one: its pieces are taken as they are, not copied).
   */
  *decode(chunk: Uint8Array | Iterable<Uint8Array>): Generator<Uint8ArrayList> {
    if (chunk instanceof Uint8Array) this.buffer.append(chunk);
    else this.buffer.appendAll([...chunk]);
    for (;;) {
      const length = frameLength(this.buffer, this.maxFrameBytes, this.longest);
      if (length === undefined) return;
      // frameLength takes only minimal prefixes, so the prefix is as long as its value needs.
      const end = varintLength(length) + length;
      if (this.buffer.byteLength < end) return;
      const frame = this.buffer.sublist(end - length, end);
      this.buffer.consume(end);
      if (length > 0) yield frame;
    }
  }
}

export const frameDecoder = (maxFrameBytes: number): FrameDecoder => new FrameDecoder(maxFrameBytes);

/**
 * The length a frame's prefix announces, or undefined while the prefix may still be completed.
 * A prefix that never can be is refused. "Not yet" is a value, not a throw: a stream asks after
 * every frame it reads, and an Error's stack cost a cross-node invoke tens of microseconds.
 */
export function frameLength(buf: Uint8Array | Uint8ArrayList, maxFrameBytes: number, longest = varintLength(maxFrameBytes)): number | undefined {
  let value = 0;
  let scale = 1;
  const read = Math.min(buf.byteLength, longest);
  for (let i = 0; i < read; i++) {
    const byte = buf instanceof Uint8Array ? buf[i] : buf.get(i);
    value += (byte & 0x7f) * scale;
    if (byte < 0x80) {
      if (byte === 0 && i > 0) throw new DmsError('invalid', 'frame length prefix is not minimally encoded');
      if (value > maxFrameBytes) throw new DmsError('too_large', `frame of ${value} bytes, over the ${maxFrameBytes}-byte limit`);
      return value;
    }
    scale *= 0x80;
  }
  if (buf.byteLength >= longest) throw new DmsError('too_large', `frame length prefix longer than ${longest} bytes: over the ${maxFrameBytes}-byte limit`);
  return undefined;
}

/**
 * A whole frame off the front of `buffer` and what follows it, or undefined while it is
 * incomplete: for a reader that takes one frame by hand (a stream's header) before handing the
 * stream on. Refuses what frameLength refuses, as soon as the prefix shows it.
 */
export function takeFrame(buffer: Uint8Array, maxFrameBytes: number): { frame: Uint8Array; rest: Uint8Array } | undefined {
  const length = frameLength(buffer, maxFrameBytes);
  if (length === undefined) return undefined;
  // frameLength takes only minimal prefixes, so the prefix is as long as its value needs.
  const start = varintLength(length);
  if (buffer.byteLength < start + length) return undefined;
  return { frame: buffer.subarray(start, start + length), rest: buffer.subarray(start + length) };
}

const utf8 = new TextDecoder('utf-8', { fatal: true });

/** A frame's text; bytes that are not UTF-8 throw, as malformed input. */
export const frameText = (frame: Uint8Array): string => utf8.decode(frame);
