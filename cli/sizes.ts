import { parseSize, SizeError } from '../client/sizes.js';
import { CliError } from './context.js';

/** A size flag's bytes, or a one-line error naming the flag (`--memory: 512 has no unit; …`). */
export function sizeArg(flag: string, text: string): number {
  try {
    return parseSize(text);
  } catch (e) {
    if (e instanceof SizeError) throw new CliError(`${flag}: ${e.message}`);
    throw e;
  }
}
