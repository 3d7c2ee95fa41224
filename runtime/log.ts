import { destination, pino, type Logger } from 'pino';

export type { Logger };

/** Structured logs on stderr (stdout stays for command output); `silent` for tests and benches. */
export function createLogger(level: string = 'info', name = 'dms'): Logger {
  return pino({ name, level, base: { pid: process.pid } }, destination({ fd: 2, sync: false }));
}

export const silentLogger = (): Logger => pino({ level: 'silent' });
