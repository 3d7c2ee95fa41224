/**
 * Which registries a job's image may come from. The engine pulls with the machine's network
 * position, so an image naming a registry on loopback, link-local or a private range would
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
import { BlockList, isIP, isIPv4 } from 'node:net';
import { parseImageReference } from '../../behaviors/jobs/image-ref.js';

const PRIVATE = new BlockList();
// "This network" (0.0.0.0 is what a listener's any-address dials as), loopback, private, link-local.
PRIVATE.addSubnet('0.0.0.0', 8, 'ipv4');
PRIVATE.addSubnet('127.0.0.0', 8, 'ipv4');
PRIVATE.addSubnet('10.0.0.0', 8, 'ipv4');
PRIVATE.addSubnet('172.16.0.0', 12, 'ipv4');
PRIVATE.addSubnet('192.168.0.0', 16, 'ipv4');
PRIVATE.addSubnet('169.254.0.0', 16, 'ipv4');
// Unspecified, loopback, unique local, link-local. IPv4-mapped addresses (::ffff:127.0.0.1)
// are checked against the IPv4 ranges by BlockList itself.
PRIVATE.addAddress('::', 'ipv6');
PRIVATE.addAddress('::1', 'ipv6');
PRIVATE.addSubnet('fc00::', 7, 'ipv6');
PRIVATE.addSubnet('fe80::', 10, 'ipv6');

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
  const v6 = name.includes(':');
  const address = v6 ? name : (numericIPv4(name) ?? (isIPv4(name) ? name : null));
  if (address === null) return null;
  return PRIVATE.check(address, v6 ? 'ipv6' : 'ipv4') ? 'is a loopback, link-local or private address' : null;
}

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
 * loopback, link-local or private address. A name that does not resolve (or not within
 * LOOKUP_MS) is left to the engine, whose pull then fails.
 */
export async function refusedRegistryResolved(image: string, allowed: readonly string[], resolve: Resolve = resolveAll): Promise<string | null> {
  const literal = refusedRegistry(image, allowed);
  if (literal !== null) return literal;
  const registry = registryOf(image, allowed);
  if (!registry || isIP(registry.host) !== 0 || numericIPv4(registry.host) !== null) return null;
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<null>((resolveTimeout) => {
    timer = setTimeout(() => resolveTimeout(null), LOOKUP_MS);
    timer.unref();
  });
  const addresses = await Promise.race([resolve(registry.host).catch(() => null), timeout]).finally(() => clearTimeout(timer));
  const bad = addresses?.find((a) => PRIVATE.check(a.address, a.family === 6 ? 'ipv6' : 'ipv4'));
  return bad ? refusal(registry.domain, `resolves to ${bad.address}, a loopback, link-local or private address`) : null;
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
