/**
 * The length prefix of a frame (actor protocol, block exchange): a reader may wait for a prefix
 * to be completed only while it still can be, or a peer holds the node's memory with one.
 */
import { describe, expect, it } from 'vitest';
import { encodeBytesFrame, frameDecoder, frameLength, takeFrame } from '../../runtime/network/frames.js';

const MAX = 1024 * 1024;
const frames = (decoder: ReturnType<typeof frameDecoder>, data: Uint8Array) => [...decoder.decode(data)].map((f) => f.subarray());

describe('frame length prefixes', () => {
  it('reads frames split anywhere, the prefix too', () => {
    const decoder = frameDecoder(MAX);
    const a = encodeBytesFrame(new Uint8Array(300).fill(1));
    const b = encodeBytesFrame(new Uint8Array(5).fill(2));
    const all = Buffer.concat([a, b]);
    expect(frames(decoder, all.subarray(0, 1))).toEqual([]);
    const got = [...frames(decoder, all.subarray(1, 200)), ...frames(decoder, all.subarray(200))];
    expect(got.map((f) => f.length)).toEqual([300, 5]);
  });

  it('refuses a prefix that can no longer end within the limit, at once, whatever follows it', () => {
    // 0xff eight times: the library's reader threw RangeError, read as "not all here yet", and
    // every later byte was kept.
    const decoder = frameDecoder(MAX);
    expect(() => frames(decoder, new Uint8Array(8).fill(0xff))).toThrow(/length prefix longer than 3 bytes/);
    expect(() => frames(frameDecoder(MAX), Uint8Array.of(0xff, 0xff, 0xff))).toThrow(/longer than 3 bytes/);
    // Incomplete but still possible: waited for.
    expect(frames(frameDecoder(MAX), Uint8Array.of(0xff, 0xff))).toEqual([]);
  });

  it('refuses a length over the limit before the frame arrives, and a prefix not minimally encoded', () => {
    expect(() => frameLength(Uint8Array.of(0x81, 0x80, 0x40), MAX)).toThrow(/frame of 1048577 bytes, over the 1048576-byte limit/);
    expect(frameLength(Uint8Array.of(0x80, 0x80, 0x40), MAX)).toBe(MAX);
    expect(() => frameLength(Uint8Array.of(0x85, 0x00), MAX)).toThrow(/not minimally encoded/);
    expect(frameLength(Uint8Array.of(0x00), MAX)).toBe(0);
    // Not yet complete is an answer, not a throw: a stream asks after every frame it reads.
    expect(frameLength(new Uint8Array(0), MAX)).toBeUndefined();
    expect(frameLength(Uint8Array.of(0x80, 0x80), MAX)).toBeUndefined();
  });

  it('reads a list of pieces as a stream hands it over, a frame across two of them', () => {
    const decoder = frameDecoder(MAX);
    const a = encodeBytesFrame(new Uint8Array(300).fill(1));
    const b = encodeBytesFrame(new Uint8Array(5).fill(2));
    const got = [...decoder.decode([a.subarray(0, 100), a.subarray(100), b.subarray(0, 2)]), ...decoder.decode([b.subarray(2)])];
    expect(got.map((f) => [f.byteLength, f.get(0)])).toEqual([[300, 1], [5, 2]]);
  });

  it('holds at most one partial frame and one read, however the bytes are cut', () => {
    const decoder = frameDecoder(4096);
    const body = new Uint8Array(4096).fill(7);
    const stream = Buffer.concat(Array.from({ length: 64 }, () => encodeBytesFrame(body)));
    let seen = 0;
    for (let at = 0; at < stream.length; at += 1000) {
      seen += frames(decoder, stream.subarray(at, at + 1000)).length;
      expect((decoder as unknown as { buffer: { byteLength: number } }).buffer.byteLength).toBeLessThanOrEqual(4096 + 3 + 1000);
    }
    expect(seen).toBe(64);
  });

  it('takes one frame by hand: waits while incomplete, hands back what follows, refuses as the decoder does', () => {
    const a = encodeBytesFrame(new Uint8Array(200).fill(3));
    const all = Buffer.concat([a, Uint8Array.of(9, 9)]);
    expect(takeFrame(all.subarray(0, 1), 1024)).toBeUndefined();
    expect(takeFrame(all.subarray(0, a.length - 1), 1024)).toBeUndefined();
    const taken = takeFrame(all, 1024)!;
    expect([taken.frame.length, [...taken.rest]]).toEqual([200, [9, 9]]);
    expect(() => takeFrame(Uint8Array.of(0x80, 0x80, 0x40), 1024)).toThrow(/over the 1024-byte limit/);
    expect(() => takeFrame(Uint8Array.of(0x85, 0x00), 1024)).toThrow(/not minimally encoded/);
  });
});
