/**
 * Sizes as people write and read them. Decimal units (KB, MB, GB, TB) are powers of 1000 and
 * binary ones (KiB, MiB, GiB, TiB) powers of 1024, case-insensitive, as in the JEDEC/IEC
 * convention. No package in this install parses both families strictly (pretty-bytes only
 * formats), hence this small module.
 *
 * A size must say its unit: `512` for memory was meant as 512 MiB far more often than as 512
 * bytes, and one-letter units (`512M`) mean 10^6 to some tools and 2^20 to others (Docker), so
 * both are refused with the spellings that are not ambiguous. Zero needs no unit.
 */

const UNITS: Record<string, number> = {
  b: 1,
  kb: 1e3,
  mb: 1e6,
  gb: 1e9,
  tb: 1e12,
  kib: 2 ** 10,
  mib: 2 ** 20,
  gib: 2 ** 30,
  tib: 2 ** 40,
};

/** What a size argument was wrong about; the caller prefixes the flag it came from. */
export class SizeError extends Error {}

/** Bytes from `512MiB`, `2 GB`, `1.5gib`, `0`. */
export function parseSize(text: string): number {
  const m = /^\s*(\d+(?:\.\d+)?)\s*([a-z]*)\s*$/i.exec(text);
  if (!m) throw new SizeError(`'${text}' is not a size (e.g. 512MiB, 2GiB, 10GB)`);
  const [, num, unitText] = m;
  const unit = unitText.toLowerCase();
  if (unit === '') {
    if (Number(num) === 0) return 0;
    throw new SizeError(`${num} has no unit; write ${num}MiB or ${num}MB`);
  }
  if (/^[kmgt]$/.test(unit)) {
    const u = unit.toUpperCase();
    throw new SizeError(`${text.trim()} is ambiguous; write ${num}${u}iB (powers of 1024) or ${num}${u}B (powers of 1000)`);
  }
  const factor = UNITS[unit];
  if (factor === undefined) throw new SizeError(`'${unitText}' is not a size unit (B, KB, MB, GB, TB, KiB, MiB, GiB, TiB)`);
  const bytes = Math.round(Number(num) * factor);
  if (!Number.isSafeInteger(bytes)) throw new SizeError(`${text.trim()} is too large`);
  // Read as 0 it would be "left out": a job asking 0.0000001B of memory was given the default 512 MiB.
  if (bytes === 0 && Number(num) !== 0) throw new SizeError(`${text.trim()} is less than one byte`);
  return bytes;
}


const BINARY = ['B', 'KiB', 'MiB', 'GiB', 'TiB', 'PiB'];

/** Bytes for people, in binary units (`64 MiB`, `1.5 GiB`), which parseSize reads back. */
export function formatBytes(n: number): string {
  let i = 0;
  let v = n;
  while (v >= 1024 && i < BINARY.length - 1) {
    v /= 1024;
    i++;
  }
  return `${Number.isInteger(v) ? v : v.toFixed(1)} ${BINARY[i]}`;
}
