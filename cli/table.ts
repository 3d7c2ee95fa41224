/** Columns padded to their widest cell, two spaces apart; the last one is not padded. */
export function grid(head: string[], rows: string[][]): string {
  const widths = head.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i].length)));
  const line = (cols: string[]) => cols.map((c, i) => (i === cols.length - 1 ? c : c.padEnd(widths[i]))).join('  ');
  return [line(head), ...rows.map(line)].join('\n');
}
