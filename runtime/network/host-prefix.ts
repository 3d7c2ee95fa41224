/**
 * The part of an IP address one host or subscriber holds: an IPv4 address, or an IPv6 /64
 * (what an ISP hands one subscriber, and what SLAAC lets any host on it pick addresses from at
 * will). A bound kept per address is kept per this, or one host walking its /64 has 2^64 shares.
 */
import ipaddr from 'ipaddr.js';

/** `ip`'s prefix (`10.1.2.3`, `2001:db8:0:1::/64`); an IPv4 address written as IPv6 (`::ffff:a.b.c.d`) is that IPv4 host; undefined when `ip` is not an IP address. */
export function hostPrefix(ip: string): string | undefined {
  // A scoped link-local address (fe80::1%eth0) names its interface after the %.
  const bare = ip.split('%')[0]!;
  if (ipaddr.IPv4.isValidFourPartDecimal(bare)) return bare;
  if (!ipaddr.IPv6.isValid(bare)) return undefined;
  const v6 = ipaddr.IPv6.parse(bare);
  if (v6.isIPv4MappedAddress()) return v6.toIPv4Address().toString();
  return v6.parts.slice(0, 4).map((g) => g.toString(16)).join(':') + '::/64';
}
