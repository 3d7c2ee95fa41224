import { lookup } from 'node:dns/promises';
import { hostname } from 'node:os';

/** A loopback, link-local or private address (IPv4 or IPv6). */
const PRIVATE_ADDRESS = /^(127\.|10\.|192\.168\.|172\.(1[6-9]|2\d|3[01])\.|169\.254\.|::1$|f[cd][0-9a-f]{2}:|fe80:)/i;

/**
 * This machine's own name, when it resolves to loopback or private addresses (as /etc/hosts
 * makes it on most machines and containers) and can name a registry: a registry name no literal
 * check can see through. `addresses` in the order the resolver gives them; null when the name
 * does not serve (the tests that need it are skipped).
 */
export async function privateNameHere(): Promise<{ name: string; addresses: string[] } | null> {
  const name = hostname().toLowerCase();
  if (!/^[a-z0-9-]+(\.[a-z0-9-]+)*$/.test(name)) return null;
  const addresses = (await lookup(name, { all: true, verbatim: true }).catch(() => [])).map((a) => a.address).filter((a) => PRIVATE_ADDRESS.test(a));
  return addresses.length > 0 ? { name, addresses } : null;
}
