import { describe, expect, it } from 'vitest';
import { clientFrom } from '../../http/limits.js';
import { RateLimiter } from '../../runtime/rate-limiter.js';
import { hostPrefix } from '../../runtime/network/host-prefix.js';

describe('hostPrefix', () => {
  it('is the IPv4 address, the IPv6 /64 however written, the IPv4 inside a mapped address, and nothing for what is not an address', () => {
    expect(hostPrefix('10.1.2.3')).toBe('10.1.2.3');
    expect(hostPrefix('2001:db8:0:1::5')).toBe('2001:db8:0:1::/64');
    expect(hostPrefix('2001:0DB8:0000:0001:ffff:1:2:3')).toBe('2001:db8:0:1::/64');
    expect(hostPrefix('fe80::1%eth0')).toBe('fe80:0:0:0::/64');
    expect(hostPrefix('::ffff:10.1.2.3')).toBe('10.1.2.3');
    expect(hostPrefix('unknown')).toBeUndefined();
    expect(hostPrefix('')).toBeUndefined();
  });
});

describe('the client a REST request counts against', () => {
  it('is one for every address of an IPv6 /64, so walking the /64 does not escape the rate limit', () => {
    const limiter = new RateLimiter(1, 5);
    const now = 1_000_000;
    // Each request from an address of its own, as SLAAC lets any host pick.
    const waits = Array.from({ length: 8 }, (_, i) => limiter.take(clientFrom(`2001:db8:0:1::${(i + 1).toString(16)}`, undefined).key, now));
    expect(waits.slice(0, 5)).toEqual([0, 0, 0, 0, 0]);
    expect(waits.slice(5).every((w) => w > 0)).toBe(true);
    // Another subscriber's /64 has a bucket of its own.
    expect(limiter.take(clientFrom('2001:db8:0:2::1', undefined).key, now)).toBe(0);
  });

  it('is the IPv4 address (mapped or not), the principal when authenticated, and says whether the caller is local', () => {
    expect(clientFrom('::ffff:10.1.2.3', undefined)).toEqual({ key: 'ip:10.1.2.3', loopback: false });
    expect(clientFrom('10.1.2.3', undefined).key).toBe('ip:10.1.2.3');
    expect(clientFrom('10.1.2.3', 'ops').key).toBe('ops');
    expect(clientFrom('127.0.0.1', undefined).loopback).toBe(true);
    expect(clientFrom('::1', undefined).loopback).toBe(true);
    expect(clientFrom(undefined, undefined)).toEqual({ key: 'ip:unknown', loopback: false });
  });
});
