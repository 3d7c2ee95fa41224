const BINARY = ['B', 'KiB', 'MiB', 'GiB', 'TiB', 'PiB'];

/**
 * Bytes for people, in binary units (`64 MiB`, `1.5 GiB`), which the CLI's size parser
 * (client/sizes.ts) reads back. Here, not in the client, because node-side messages (an
 * out-of-memory kill, a refused reservation) use it too.
 */
export function formatBytes(n: number): string {
  let i = 0;
  let v = n;
  while (v >= 1024 && i < BINARY.length - 1) {
    v /= 1024;
    i++;
  }
  return `${Number.isInteger(v) ? v : v.toFixed(1)} ${BINARY[i]}`;
}
