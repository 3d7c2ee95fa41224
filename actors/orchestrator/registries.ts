/**
 * Which registries a job's image may come from. The engine pulls with the machine's network
 * position, so an image naming a registry on loopback, link-local, a private range or any other
 * non-public range (carrier-grade NAT, reserved, NAT64 of those) would
 * let whoever submits a job make this machine talk to services only it can reach (cloud
 * metadata at 169.254.169.254, a registry on 127.0.0.1:5000). Such hosts are refused unless
 * the operator lists them in `jobs.allowed_registries`.
 *
 * A registry named by a DNS name is also looked up when the job is submitted
 * (`refusedRegistryResolved`): a name that resolves to such an address (`vm:5000`, with `vm`
 * in /etc/hosts) is refused the same way. The engine resolves the name again when it pulls,
 * so a name whose answer changes in between (DNS rebinding) is not caught here.
 */
import { lookup } from 'node:dns/promises';
import { isIP, isIPv4 } from 'node:net';
import ipaddr from 'ipaddr.js';
import { parseImageReference } from '../../behaviors/jobs/image-ref.js';
import { settledWithin } from '../../runtime/deadline.js';

type Address = ipaddr.IPv4 | ipaddr.IPv6;

/** IPv6 prefixes whose last 32 bits are an IPv4 address that traffic to them reaches. */
const EMBEDS_LAST_32: [ipaddr.IPv6, number][] = [
  // IPv4-mapped (::ffff:a.b.c.d) and RFC 6145's translated form (::ffff:0:a.b.c.d).
  [ipaddr.IPv6.parse('::ffff:0:0'), 96],
  [ipaddr.IPv6.parse('::ffff:0:0:0'), 96],
  // NAT64's well-known prefix (RFC 6052): a DNS64 network turns 64:ff9b::7f00:1 into 127.0.0.1.
  [ipaddr.IPv6.parse('64:ff9b::'), 96],
  // IPv4-compatible (::a.b.c.d, deprecated by RFC 4291): stacks that still read it reach the IPv4 host.
  [ipaddr.IPv6.parse('::'), 96],
];
/** Only IPv6 global unicast is public; the rest of the space is reserved or special. */
const GLOBAL_UNICAST_V6: [ipaddr.IPv6, number] = [ipaddr.IPv6.parse('2000::'), 3];

/**
 * Why `address` is not a public unicast address a registry may be on, or null when it is. The
 * ranges are ipaddr.js's, which follows IANA's special-purpose registries: anything it does not
 * call plain `unicast` (loopback, private, link-local, carrier-grade NAT where cloud metadata
 * lives, multicast, reserved, documentation…) is refused. An address carrying an IPv4 one
 * (mapped, NAT64, IPv4-compatible, 6to4) is judged by that IPv4 address.
 */
export function nonPublicReason(address: Address): string | null {
  if (address.kind() === 'ipv4') {
    const range = address.range();
    return range === 'unicast' ? null : `${address.toString()} (${range})`;
  }
  const v6 = address as ipaddr.IPv6;
  const embedded = embeddedIPv4(v6);
  if (embedded) {
    const why = nonPublicReason(embedded);
    return why === null ? null : `${v6.toString()}, which carries ${why}`;
  }
  const range = v6.range();
  if (range !== 'unicast' || !v6.match(GLOBAL_UNICAST_V6)) return `${v6.toString()} (${range === 'unicast' ? 'not global unicast' : range})`;
  return null;
}

function embeddedIPv4(v6: ipaddr.IPv6): ipaddr.IPv4 | null {
  const bytes = v6.toByteArray();
  // :: and ::1 are IPv6's own unspecified and loopback addresses, not IPv4-compatible ones.
  if (v6.range() === 'unspecified' || v6.range() === 'loopback') return null;
  if (EMBEDS_LAST_32.some((prefix) => v6.match(prefix))) return new ipaddr.IPv4(bytes.slice(12, 16));
  // 6to4 (2002:AABB:CCDD::/48) routes to the IPv4 address in its bits 16-47.
  if (v6.range() === '6to4') return new ipaddr.IPv4(bytes.slice(2, 6));
  return null;
}

/** Why the address text `text` (IPv4 dotted quad or IPv6) is not public; null when it is. */
function addressReason(text: string): string | null {
  let address: Address;
  try {
    address = ipaddr.parse(text);
  } catch {
    // Only called with what the resolver or isIP took for an address: one ipaddr.js cannot
    // read is not one this node can vouch for.
    return `${text} (unreadable address)`;
  }
  return nonPublicReason(address);
}

/**
 * An IPv4 address the way inet_aton reads it (what a C resolver does with a host name made of
 * numbers): 1 to 4 parts, each decimal, octal (0…) or hex (0x…), so '127.1', '0x7f.0.0.1' and
 * '2130706433' all reach 127.0.0.1. Null when `host` is not such a number.
 */
export function numericIPv4(host: string): string | null {
  const parts = host.split('.');
  if (parts.length > 4) return null;
  const values: number[] = [];
  for (const p of parts) {
    let v: number;
    if (/^0x[0-9a-f]*$/i.test(p)) v = p.length === 2 ? 0 : parseInt(p.slice(2), 16);
    else if (/^0[0-7]*$/.test(p)) v = parseInt(p, 8);
    else if (/^[1-9][0-9]*$/.test(p)) v = parseInt(p, 10);
    else return null;
    values.push(v);
  }
  // The last part fills the remaining bytes: a.b.c.d, a.b.(16 bits), a.(24 bits), (32 bits).
  const last = values.pop()!;
  if (values.some((v) => v > 255) || last >= 2 ** (8 * (4 - values.length))) return null;
  let n = last;
  values.forEach((v, i) => (n += v * 2 ** (8 * (3 - i))));
  return [24, 16, 8, 0].map((s) => Math.floor(n / 2 ** s) % 256).join('.');
}

/** Why `host` (no port, no brackets) is not a public registry host; null when it is. */
export function privateHostReason(host: string): string | null {
  const name = host.toLowerCase();
  if (name === 'localhost' || name.endsWith('.localhost')) return 'names this machine';
  const address = name.includes(':') ? name : (numericIPv4(name) ?? (isIPv4(name) ? name : null));
  if (address === null) return null;
  const why = addressReason(address);
  return why === null ? null : `is ${NON_PUBLIC}: ${why}`;
}

const NON_PUBLIC = 'a non-public address';

/**
 * Why `image` may not be pulled from where it names, or null when it may. `allowed` holds
 * host[:port] entries as the operator wrote them; a bare host allows it on every port.
 */
export function refusedRegistry(image: string, allowed: readonly string[]): string | null {
  const registry = registryOf(image, allowed);
  if (!registry) return null;
  const why = privateHostReason(registry.host);
  return why === null ? null : refusal(registry.domain, why);
}

/** How long a submission waits for the registry name's lookup before leaving it to the engine. */
const LOOKUP_MS = 2_000;

export type Resolve = (host: string) => Promise<{ address: string; family: number }[]>;
const resolveAll: Resolve = (host) => lookup(host, { all: true, verbatim: true });

/**
 * `refusedRegistry`, and for a registry named by a DNS name, whether the name resolves to a
 * loopback, private, link-local or other non-public address. A name that does not resolve (or not within
 * LOOKUP_MS) is left to the engine, whose pull then fails.
 */
export async function refusedRegistryResolved(image: string, allowed: readonly string[], resolve: Resolve = resolveAll): Promise<string | null> {
  const literal = refusedRegistry(image, allowed);
  if (literal !== null) return literal;
  const registry = registryOf(image, allowed);
  if (!registry || isIP(registry.host) !== 0 || numericIPv4(registry.host) !== null) return null;
  const addresses = await settledWithin(resolve(registry.host).catch(() => null), LOOKUP_MS, () => null);
  for (const { address } of addresses ?? []) {
    const why = addressReason(address);
    if (why !== null) return refusal(registry.domain, `resolves to ${why}, ${NON_PUBLIC}`);
  }
  return null;
}

/** The registry an image names (not Docker Hub's implicit one), unless `allowed` lists it. */
function registryOf(image: string, allowed: readonly string[]): { domain: string; host: string } | null {
  const ref = parseImageReference(image);
  if ('error' in ref || ref.domain === undefined) return null;
  const domain = ref.domain.toLowerCase();
  const m = /^(\[[^\]]+\]|[^:]+)(?::(\d+))?$/.exec(domain);
  if (!m) return null;
  const listed = allowed.map((a) => a.toLowerCase());
  if (listed.includes(domain) || listed.includes(m[1])) return null;
  return { domain: ref.domain, host: m[1].replace(/^\[|\]$/g, '') };
}

const refusal = (domain: string, why: string) => `image: registry ${domain} ${why}; list it in jobs.allowed_registries to pull from it`;
