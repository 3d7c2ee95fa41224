/**
 * How `dms` ends when something went wrong: one line, `dms: <reason>`, or `{"error": …}` with
 * --json, and a non-zero exit. Commander's own parse errors (unknown option, missing argument)
 * get the same one line, pointing at the failing command's --help rather than printing it
 * whole: the help buries the one line that matters.
 */
import { type Command, CommanderError } from 'commander';
import { describeError } from './context.js';
import { terminalSafe } from './terminal.js';

/** A parse error of `command`, as commander worded it. */
class UsageError extends Error {
  constructor(
    readonly command: Command,
    readonly parseError: CommanderError,
  ) {
    super(parseError.message);
  }
}

/** Commander's codes for output the user asked for (help, version), which are not errors. */
const NOT_ERRORS = new Set(['commander.helpDisplayed', 'commander.help', 'commander.version']);

/** Makes every command of the tree report parse errors through `fail` instead of printing them. */
export function routeUsageErrors(program: Command): void {
  const visit = (cmd: Command) => {
    cmd.configureOutput({ outputError: () => undefined });
    cmd.exitOverride((err) => {
      throw NOT_ERRORS.has(err.code) ? err : new UsageError(cmd, err);
    });
    cmd.commands.forEach(visit);
  };
  visit(program);
}

const pathOf = (cmd: Command): string => (cmd.parent ? `${pathOf(cmd.parent)} ${cmd.name()}` : cmd.name());

/** Ends the process for `e`, thrown while parsing or running a command. */
export function fail(e: unknown, json: boolean): never {
  if (e instanceof CommanderError) process.exit(e.exitCode);
  let reason: string;
  let code = 1;
  if (e instanceof UsageError) {
    // "error: unknown option '--x'\n(Did you mean --y?)" → "unknown option '--x' (Did you mean --y?)"
    const text = e.parseError.message.replace(/^error: /, '').replace(/\s*\n\s*/g, ' ');
    reason = `${text}; see \`${pathOf(e.command)} --help\``;
    code = e.parseError.exitCode || 1;
  } else {
    reason = describeError(e);
    code = (e as { exitCode?: number }).exitCode ?? 1;
  }
  process.stderr.write(json ? `${JSON.stringify({ error: reason })}\n` : `dms: ${terminalSafe(reason)}\n`);
  process.exit(code);
}
