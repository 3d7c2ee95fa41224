import { createRequire } from 'node:module';
import { destination, type DestinationStream, pino, type Logger } from 'pino';
import type { prettyFactory as PrettyFactory } from 'pino-pretty';

export type { Logger };

/** JSON lines for machines and files; pretty for a person at a terminal. */
export const LOG_FORMATS = ['pretty', 'json'] as const;
export type LogFormat = (typeof LOG_FORMATS)[number];

export interface LoggerOptions {
  name?: string;
  /** Default: pretty when stderr is a terminal, JSON otherwise (pipes, files, log collectors). */
  format?: LogFormat;
}

/** Structured logs on stderr (stdout stays for command output); `silent` for tests and benches. */
export function createLogger(level: string = 'info', opts: LoggerOptions = {}): Logger {
  const stderr = destination({ fd: 2, sync: false });
  const format = opts.format ?? (process.stderr.isTTY ? 'pretty' : 'json');
  return pino({ name: opts.name ?? 'dms', level, base: { pid: process.pid } }, format === 'pretty' ? prettyStream(stderr) : stderr);
}

/**
 * Formats each JSON line in this process, synchronously, onto the same stderr destination.
 * pino's transport would run pino-pretty in a worker thread, whose last lines can be lost
 * when the node exits right after logging (a failed start, a shutdown).
 */
function prettyStream(out: ReturnType<typeof destination>): DestinationStream & { flush(cb: (err?: Error) => void): void } {
  // Required only here: a node logging JSON (under a supervisor, in a container) never holds
  // pino-pretty and its 29 modules.
  const { prettyFactory } = createRequire(import.meta.url)('pino-pretty') as { prettyFactory: typeof PrettyFactory };
  const prettify = prettyFactory({
    colorize: Boolean(process.stderr.isTTY),
    translateTime: 'SYS:HH:MM:ss.l',
    ignore: 'hostname',
  });
  return {
    write: (line: string) => out.write(prettify(line)),
    flush: (cb) => out.flush(cb),
  };
}

export const silentLogger = (): Logger => pino({ level: 'silent' });

/**
 * At most one log line per `intervalMs` about one thing, counting those held back: a source
 * that repeats (a peer in a loop) must not grow the log, and the line that is written says how
 * many were not.
 */
export class LogGate {
  private last = -Infinity;
  private held = 0;

  constructor(private readonly intervalMs: number) {}

  /** How many were held back since the last line when one may be written now; undefined, one more held back, when not. */
  pass(now = Date.now()): number | undefined {
    if (now - this.last < this.intervalMs) {
      this.held++;
      return undefined;
    }
    const held = this.held;
    this.last = now;
    this.held = 0;
    return held;
  }
}
