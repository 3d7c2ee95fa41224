/**
 * What a command reads from a file or standard input (`-`): a spec, an envelope, a token. Read
 * in pieces and refused past a bound, so `dms jobs submit /dev/zero` (or a runaway pipe) ends
 * with a message instead of reading until memory runs out.
 */
import { closeSync, openSync, readSync } from 'node:fs';
import { CliError } from './context.js';

/** Far above any spec or envelope the node takes (its `rest.body_limit` is 1 MiB as shipped). */
export const MAX_TEXT_INPUT_BYTES = 16 * 1024 * 1024;

export function readTextInput(file: string, limit = MAX_TEXT_INPUT_BYTES): string {
  return readBoundedInput(file, limit, (what) => `${what} is larger than ${limit} bytes: not a spec, an envelope or a token`).toString('utf8');
}

/** The bytes of `file` (`-`: standard input), read in pieces and refused with `tooLarge`'s message past `limit`. */
export function readBoundedInput(file: string, limit: number, tooLarge: (what: string) => string): Buffer {
  const fd = file === '-' ? 0 : openSync(file, 'r');
  try {
    const chunks: Buffer[] = [];
    let size = 0;
    const piece = Buffer.allocUnsafe(64 * 1024);
    for (;;) {
      let n: number;
      try {
        n = readSync(fd, piece, 0, piece.length, null);
      } catch (e) {
        // Standard input left non-blocking by whatever feeds it: wait for it as a blocking read would.
        if ((e as NodeJS.ErrnoException).code !== 'EAGAIN') throw e;
        Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 10);
        continue;
      }
      if (n === 0) break;
      size += n;
      if (size > limit) throw new CliError(tooLarge(file === '-' ? 'standard input' : file));
      chunks.push(Buffer.from(piece.subarray(0, n)));
    }
    return Buffer.concat(chunks, size);
  } finally {
    if (fd !== 0) closeSync(fd);
  }
}
