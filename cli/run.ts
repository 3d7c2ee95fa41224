import '../runtime/polyfills.js';
import { ClientError } from '../client/errors.js';
import { homeOf, nodeFailure } from './context.js';
import { buildProgram } from './program.js';
import { fail } from './usage.js';
import { endRunOptions } from './commands/run.js';

/** Runs the `dms` command line `argv` (as process.argv: node, script, then the arguments). */
export async function runCli(argv: string[]): Promise<void> {
  const program = buildProgram();
  try {
    await program.parseAsync(endRunOptions(program, argv));
  } catch (e) {
    // A node failure no command worded itself (the REST commands leave them to here).
    fail(e instanceof ClientError ? nodeFailure(e, homeOf(program)) : e, Boolean(program.opts().json));
  }
}
