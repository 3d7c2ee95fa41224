/** Nanoseconds since the Unix epoch, the unit of `opt.exp`. */
export function nowNs(): bigint {
  return BigInt(Date.now()) * 1_000_000n;
}

export const msToNs = (ms: number): bigint => BigInt(Math.round(ms)) * 1_000_000n;

/** Milliseconds from now until `exp` (never negative; capped to what setTimeout accepts). */
export function msUntil(exp: bigint): number {
  const ms = Number((exp - nowNs()) / 1_000_000n);
  return Math.min(Math.max(ms, 0), 2_147_483_647);
}

export const isExpired = (exp: bigint, now: bigint = nowNs()): boolean => exp <= now;

let lastNonce = 0n;
/**
 * Nonces unique per sender: the current time in ns, bumped past the last one issued, so they
 * also stay unique across restarts of a process with a sane clock.
 */
export function nextNonce(): bigint {
  const t = nowNs();
  lastNonce = t > lastNonce ? t : lastNonce + 1n;
  return lastNonce;
}
