/** How inbound connections are shared between addresses (runtime/network/inbound-share.ts), in process. */
import { describe, expect, it } from 'vitest';
import type { Connection, MultiaddrConnection } from '@libp2p/interface';
import { multiaddr } from '@multiformats/multiaddr';
import { hostOf, InboundShare, PENDING_PER_HOST } from '../../runtime/network/inbound-share.js';

let clock = 0;
function conn(ip: string, direction: 'inbound' | 'outbound' = 'inbound'): Connection {
  const family = ip.includes(':') ? 'ip6' : 'ip4';
  return { direction, status: 'open', remoteAddr: multiaddr(`/${family}/${ip}/tcp/4001`), timeline: { open: ++clock }, abort() {} } as unknown as Connection;
}

type Socket = MultiaddrConnection & { close(): void; aborted: boolean };
/** A socket accepted from `ip`, whose close the test fires. */
function socket(ip: string): Socket {
  const listeners: (() => void)[] = [];
  const s = {
    remoteAddr: multiaddr(`/ip4/${ip}/tcp/5000`),
    timeline: { open: ++clock },
    aborted: false,
    addEventListener: (_: string, f: () => void) => listeners.push(f),
    close: () => listeners.forEach((f) => f()),
    abort: () => {
      s.aborted = true;
      s.close();
    },
  };
  return s as unknown as Socket;
}

describe('hostOf', () => {
  it('is the IPv4 address, the IPv6 /64 however written, and the IPv4 inside a mapped IPv6 address', () => {
    expect(hostOf(multiaddr('/ip4/10.1.2.3/tcp/1'))).toBe('10.1.2.3');
    expect(hostOf(multiaddr('/ip6/2001:db8:0:1::5/tcp/1'))).toBe('2001:db8:0:1::/64');
    expect(hostOf(multiaddr('/ip6/2001:0db8:0000:0001:ffff:1:2:3/tcp/1'))).toBe('2001:db8:0:1::/64');
    expect(hostOf(multiaddr('/ip6/::1/tcp/1'))).toBe('0:0:0:0::/64');
    expect(hostOf(multiaddr('/ip6/::ffff:a01:203/tcp/1'))).toBe('10.1.2.3');
    expect(hostOf(multiaddr('/ip6/::ffff:10.1.2.3/tcp/1'))).toBe('10.1.2.3');
  });
});

describe('InboundShare', () => {
  it('refuses a handshake past PENDING_PER_HOST from one address, and counts each ended one once', () => {
    const share = new InboundShare(10);
    const held = Array.from({ length: PENDING_PER_HOST }, () => socket('10.0.0.1'));
    for (const s of held) expect(share.denyHandshake(s)).toBe(false);
    expect(share.denyHandshake(socket('10.0.0.1'))).toBe(true);
    expect(share.denyHandshake(socket('10.0.0.2'))).toBe(false);
    // Done (the gater is told) and then closed: one slot back, not two.
    share.handshakeEnded(held[0]!);
    held[0]!.close();
    expect(share.pendingFrom('10.0.0.1')).toBe(PENDING_PER_HOST - 1);
    held[1]!.close();
    expect(share.pendingFrom('10.0.0.1')).toBe(PENDING_PER_HOST - 2);
    expect(share.denyHandshake(socket('10.0.0.1'))).toBe(false);
  });

  it('with every pending place taken, closes the oldest handshake of the address pending the most for a new address', () => {
    const share = new InboundShare(10, 6);
    const flood = [socket('10.0.0.9'), socket('10.0.0.9'), socket('10.0.0.9')];
    const others = [socket('10.0.0.1'), socket('10.0.0.2'), socket('10.0.0.3')];
    for (const s of [...flood, ...others]) expect(share.denyHandshake(s)).toBe(false);
    expect(share.denyHandshake(socket('10.0.0.4'))).toBe(false);
    expect(flood.map((s) => s.aborted)).toEqual([true, false, false]);
    expect(share.pendingFrom('10.0.0.9')).toBe(2);
    // The flood's two against 10.0.0.4's one: a second from 10.0.0.4 still takes the flood's next.
    const fours = [socket('10.0.0.4')];
    expect(share.denyHandshake(fours[0]!)).toBe(false);
    expect(flood[1]!.aborted).toBe(true);
    // 10.0.0.4 now pends the most, two: a third from it is refused, nobody closed.
    expect(share.denyHandshake(socket('10.0.0.4'))).toBe(true);
    expect([...flood.slice(2), ...others].some((s) => s.aborted)).toBe(false);
    // A new address takes the place of 10.0.0.4's oldest.
    expect(share.denyHandshake(socket('10.0.0.5'))).toBe(false);
    expect(share.pendingFrom('10.0.0.4')).toBe(1);
    // Every address pends one: one more from any of them is refused ...
    expect(share.denyHandshake(socket('10.0.0.1'))).toBe(true);
    // ... and a new address takes the place of the oldest handshake of all.
    expect(share.denyHandshake(socket('10.0.0.6'))).toBe(false);
    expect(flood[2]!.aborted).toBe(true);
    expect(others.some((s) => s.aborted)).toBe(false);
  });

  it('within the maximum, closes nothing', () => {
    const share = new InboundShare(3);
    const all = [conn('10.0.0.1'), conn('10.0.0.1'), conn('10.0.0.2')];
    expect(share.choose(all[2]!, all)).toBeUndefined();
  });

  it('past it, closes the newest inbound connection of the address holding the most', () => {
    const share = new InboundShare(4);
    const flood = [conn('10.0.0.9'), conn('10.0.0.9'), conn('10.0.0.9')];
    const other = conn('10.0.0.1');
    const newcomer = conn('10.0.0.2');
    const all = [...flood, other, newcomer];
    expect(share.choose(newcomer, all)).toBe(flood[2]);
    // The one chosen is closing: the next newcomer takes the flood's next newest.
    const next = conn('10.0.0.3');
    expect(share.choose(next, [...all, next])).toBe(flood[1]);
  });

  it('closes the newcomer when its own address holds as many as any', () => {
    const share = new InboundShare(4);
    const all = [conn('10.0.0.1'), conn('10.0.0.1'), conn('10.0.0.2'), conn('10.0.0.2')];
    const newcomer = conn('10.0.0.2');
    expect(share.choose(newcomer, [...all, newcomer])).toBe(newcomer);
  });

  it('never closes a connection the node dialled, nor makes room for one', () => {
    const share = new InboundShare(2);
    const dialled = [conn('10.0.0.9', 'outbound'), conn('10.0.0.9', 'outbound')];
    const newcomer = conn('10.0.0.1');
    expect(share.choose(newcomer, [...dialled, newcomer])).toBe(newcomer);
    const ours = conn('10.0.0.1', 'outbound');
    expect(share.choose(ours, [...dialled, newcomer, ours])).toBeUndefined();
  });
});
