#!/usr/bin/env node
import '../runtime/polyfills.js';
import { ClientError } from '../client/errors.js';
import { homeOf, nodeFailure } from './context.js';
import { buildProgram } from './program.js';
import { fail } from './usage.js';
import { endRunOptions } from './commands/run.js';

const program = buildProgram();

try {
  await program.parseAsync(endRunOptions(program, process.argv));
} catch (e) {
  // A node failure no command worded itself (the REST commands leave them to here).
  fail(e instanceof ClientError ? nodeFailure(e, homeOf(program)) : e, Boolean(program.opts().json));
}
