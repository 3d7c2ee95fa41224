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

// Processes that share a key (a node's operator key is also used by `dms actor …`) must not
// issue the same nonce in the same instant: each process adds its own sub-microsecond salt.
const PROCESS_SALT = BigInt(Math.floor(Math.random() * 1000));
const preciseNowNs = (): bigint => BigInt(Math.round((performance.timeOrigin + performance.now()) * 1000)) * 1000n + PROCESS_SALT;

let lastNonce = 0n;
/**
 * Nonces unique per sender: the current time in ns (µs precision plus a per-process salt),
 * bumped past the last one issued, so they stay unique across restarts with a sane clock.
 */
export function nextNonce(): bigint {
  const t = preciseNowNs();
  lastNonce = t > lastNonce ? t : lastNonce + 1n;
  return lastNonce;
}
