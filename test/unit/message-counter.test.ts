import { describe, expect, it } from 'vitest';
import { MessageCounter } from '../../runtime/network/service-streams.js';

const prefix = (n: number): number[] => {
  const out: number[] = [];
  for (; n >= 0x80; n = Math.floor(n / 0x80)) out.push((n & 0x7f) | 0x80);
  out.push(n);
  return out;
};
const bytes = (...parts: number[][]) => Uint8Array.from(parts.flat());

describe('MessageCounter', () => {
  it('holds nothing between whole messages, however many one read carries', () => {
    const c = new MessageCounter();
    expect(c.read(bytes(prefix(3), [1, 2, 3], prefix(0), prefix(2), [9, 9]))).toBe(true);
    expect(c.held).toBe(0);
  });

  it('counts a message arriving in pieces, its prefix split too, and says when one began', () => {
    const c = new MessageCounter();
    const [lo, hi] = prefix(300);
    expect(c.read(bytes([lo!]))).toBe(true);
    expect(c.held).toBe(1);
    expect(c.read(bytes([hi!], new Array(100).fill(0)))).toBe(false);
    expect(c.held).toBe(102);
    // The rest of it, and the start of the next: a message began in this read.
    expect(c.read(bytes(new Array(200).fill(0), prefix(10), [1, 2]))).toBe(true);
    expect(c.held).toBe(3);
  });

  it('counts a length past 2^53 as held bytes, without overflowing into a small one', () => {
    const c = new MessageCounter();
    c.read(bytes(new Array(10).fill(0xff), [0x01], [5, 5, 5]));
    expect(c.held).toBe(14);
  });
});
