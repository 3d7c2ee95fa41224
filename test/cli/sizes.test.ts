import { describe, expect, it } from 'vitest';
import { formatBytes, parseSize } from '../../client/sizes.js';

describe('parseSize', () => {
  it('reads decimal and binary units, case-insensitive, with or without a space', () => {
    expect(parseSize('1B')).toBe(1);
    expect(parseSize('2KB')).toBe(2_000);
    expect(parseSize('512MB')).toBe(512_000_000);
    expect(parseSize('3gb')).toBe(3_000_000_000);
    expect(parseSize('1TB')).toBe(1e12);
    expect(parseSize('2KiB')).toBe(2048);
    expect(parseSize('512MiB')).toBe(512 * 2 ** 20);
    expect(parseSize('512 mib')).toBe(512 * 2 ** 20);
    expect(parseSize('1.5GiB')).toBe(1.5 * 2 ** 30);
    expect(parseSize('1TiB')).toBe(2 ** 40);
  });

  it('refuses a bare number, saying which units to add (0 needs none)', () => {
    expect(() => parseSize('512')).toThrow('512 has no unit; write 512MiB or 512MB');
    expect(parseSize('0')).toBe(0);
  });

  it('refuses one-letter units, which mean 1000 to some tools and 1024 to others', () => {
    expect(() => parseSize('512M')).toThrow('512M is ambiguous; write 512MiB (powers of 1024) or 512MB (powers of 1000)');
    expect(() => parseSize('2g')).toThrow('2g is ambiguous; write 2GiB (powers of 1024) or 2GB (powers of 1000)');
  });

  it('refuses what is not a size, and sizes that are not whole bytes or too large', () => {
    expect(() => parseSize('lots')).toThrow("'lots' is not a size (e.g. 512MiB, 2GiB, 10GB)");
    expect(() => parseSize('-1MiB')).toThrow("'-1MiB' is not a size");
    expect(() => parseSize('5 parsecs')).toThrow("'parsecs' is not a size unit (B, KB, MB, GB, TB, KiB, MiB, GiB, TiB)");
    expect(() => parseSize('99999999TiB')).toThrow('too large');
    // Read as 0 it meant "left out": 0.0000001B of memory was the default 512 MiB (found on a running node).
    expect(() => parseSize('0.0000001B')).toThrow('0.0000001B is less than one byte');
    expect(() => parseSize('0.4B')).toThrow('less than one byte');
    expect(parseSize('0.0B')).toBe(0);
    expect(parseSize('0.6B')).toBe(1);
  });
});

describe('formatBytes', () => {
  it('prints binary units that parseSize reads back', () => {
    expect(formatBytes(0)).toBe('0 B');
    expect(formatBytes(1023)).toBe('1023 B');
    expect(formatBytes(64 * 2 ** 20)).toBe('64 MiB');
    expect(formatBytes(1.5 * 2 ** 30)).toBe('1.5 GiB');
    expect(formatBytes(2 ** 40)).toBe('1 TiB');
    for (const n of [0, 512, 64 * 2 ** 20, 1.5 * 2 ** 30, 2 ** 40]) expect(parseSize(formatBytes(n))).toBe(n);
  });
});
