import type { Command } from 'commander';
import type { ClientError } from '../client/errors.js';
import { errorText } from '../runtime/errors.js';
import { readRuntimeInfo, resolveHome, type RuntimeInfo } from '../runtime/home.js';
import { type IgnoredConfigFile, ignoredConfigText, loadConfig } from '../runtime/config-file.js';
import { terminalSafe } from './terminal.js';

/** Options every command accepts (declared once on the program). */
export interface GlobalOptions {
  home?: string;
  config?: string;
  json?: boolean;
}

export const globals = (cmd: Command): GlobalOptions => cmd.optsWithGlobals() as GlobalOptions;

export const homeOf = (cmd: Command): string => resolveHome(globals(cmd).home);

/**
 * A working-directory config file that was not read: said on stderr in one line, whatever the
 * log level, since the user meant that file to count.
 */
export const warnIgnoredConfig = (file: IgnoredConfigFile): void => {
  process.stderr.write(`dms: warning: ${ignoredConfigText(file)}\n`);
};

/** A failure the user can act on: one line on stderr, non-zero exit. */
export class CliError extends Error {
  constructor(
    message: string,
    readonly exitCode = 1,
  ) {
    super(message);
  }
}

export function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/** The running node of this home, if its process is alive. */
export function runningNode(home: string): RuntimeInfo | undefined {
  const info = readRuntimeInfo(home);
  return info && isAlive(info.pid) ? info : undefined;
}

/** The REST base URL of this home's node: the running one's, else the configured one. */
export function nodeUrl(cmd: Command): string {
  const home = homeOf(cmd);
  const running = runningNode(home);
  if (running) return running.url;
  const config = loadConfig({ home, file: globals(cmd).config, onIgnored: warnIgnoredConfig });
  const host = config.rest.addr.includes(':') ? `[${config.rest.addr}]` : config.rest.addr;
  return `${config.tls.enabled ? 'https' : 'http'}://${host}:${config.rest.port}`;
}

/** Prints data: JSON with --json (or when it is not text), else the text form. */
export function output(cmd: Command, data: unknown, text?: string): void {
  if (globals(cmd).json || text === undefined) process.stdout.write(JSON.stringify(data, null, 2) + '\n');
  else process.stdout.write(terminalSafe(text.endsWith('\n') ? text : text + '\n'));
}

/**
 * A page of a list (`jobs list`, `ensemble list`): `kind` names the items ('jobs'). The rows go
 * to stdout (only rows, for grep and friends; --json: the list as the node answered it), and how
 * many are left past the page to stderr.
 */
export function outputPage(cmd: Command, kind: string, page: { items: unknown[]; total: number; offset?: string }, table: () => string): void {
  const offset = Number(page.offset ?? 0);
  output(cmd, page.items, page.items.length === 0 ? (page.total === 0 ? `no ${kind}` : `no ${kind} at offset ${page.offset}`) : table());
  const more = page.total - offset - page.items.length;
  if (more > 0 && !globals(cmd).json) process.stderr.write(`${more} more; use --limit/--offset (or --all)\n`);
}

/**
 * The second half of "cannot reach the node at URL: reason": which home's node was looked for,
 * and the two ways out, since the usual cause is a node that is not started or another home.
 */
export const noNodeHint = (home: string): string =>
  `no node answers there (home ${home}): start one with \`dms start\`, or pick another with --home`;

/**
 * A failure of the node or of a call to it, as the one line a person can act on: an unreachable
 * node names the home looked for and how to start one; an error reply (any kind) names the
 * behavior that answered it when known. Every command's node failures end here, so every one
 * exits non-zero on them.
 */
export function nodeFailure(e: ClientError, home: string, be?: string): CliError {
  if (e.kind === 'unreachable') return new CliError(`${e.message}; ${noNodeHint(home)}`);
  if (e.kind === 'reply' && be) return new CliError(`${be} answered with an error: ${e.nodeError ?? e.message}`);
  return new CliError(e.message);
}

export const describeError = (e: unknown): string => (e instanceof CliError ? e.message : errorText(e));
