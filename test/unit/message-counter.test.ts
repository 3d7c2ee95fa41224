import { describe, expect, it } from 'vitest';
import { MessageCounter, MessageRateLimits } from '../../runtime/network/service-streams.js';

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
    expect(c.begun).toBe(3);
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
    // Each message once, however its prefix and body were split.
    expect(c.begun).toBe(2);
  });

  it('counts a length past 2^53 as held bytes, without overflowing into a small one', () => {
    const c = new MessageCounter();
    c.read(bytes(new Array(10).fill(0xff), [0x01], [5, 5, 5]));
    expect(c.held).toBe(14);
  });
});

describe('MessageRateLimits', () => {
  it('takes each message from its peer’s bucket and its host’s: either empty refuses it, five seconds’ worth at once', () => {
    const limits = new MessageRateLimits({ perPeer: 2, perHost: 3 });
    const at = 1_000_000;
    // A peer has 10 at once; the host 15 over all its peers.
    for (let i = 0; i < 10; i++) expect(limits.take('a', 'h', at)).toBe(true);
    expect(limits.take('a', 'h', at)).toBe(false);
    for (let i = 0; i < 5; i++) expect(limits.take('b', 'h', at)).toBe(true);
    // b has 5 of its own left, but its host none.
    expect(limits.take('b', 'h', at)).toBe(false);
    // Another host, and a connection with no host (relayed), count per peer only.
    expect(limits.take('c', 'h2', at)).toBe(true);
    expect(limits.take('d', undefined, at)).toBe(true);
    // Refilled at the rate: a second later the peer has 2 more, the host 3.
    expect(limits.take('a', 'h', at + 1_000)).toBe(true);
  });

  it('says which rate refused a message: its peer’s own, or only its host’s', () => {
    const limits = new MessageRateLimits({ perPeer: 2, perHost: 3 });
    const at = 1_000_000;
    for (let i = 0; i < 10; i++) expect(limits.refusal('a', 'h', at)).toBeUndefined();
    expect(limits.refusal('a', 'h', at)).toBe('rate');
    for (let i = 0; i < 5; i++) expect(limits.refusal('b', 'h', at)).toBeUndefined();
    expect(limits.refusal('b', 'h', at)).toBe('host-rate');
  });
});
