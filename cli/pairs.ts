import { CliError } from './context.js';

/** Repeated `--flag key=value` arguments as an object; a pair without a key or `=` is refused naming `form`. */
export function parsePairs(flag: string, pairs: readonly string[], form: string): Record<string, string> {
  const out: Record<string, string> = {};
  for (const pair of pairs) {
    const eq = pair.indexOf('=');
    if (eq <= 0) throw new CliError(`${flag}: '${pair}' is not ${form}`);
    out[pair.slice(0, eq)] = pair.slice(eq + 1);
  }
  return out;
}
