/** How the network layer logs: a slice of the node's logger, or libp2p's own when it has none. */
import type { DmsLibp2p } from './host.js';

/** The slice of a pino logger the transport uses; a pino logger fits as is. */
export interface NetworkLog {
  warn(fields: Record<string, unknown>, msg: string): void;
  debug(fields: Record<string, unknown>, msg: string): void;
}

export function libp2pLog(node: DmsLibp2p): NetworkLog {
  const log = node.logger.forComponent('dms:transport');
  return {
    warn: (fields, msg) => log.error('%s %o', msg, fields),
    debug: (fields, msg) => log('%s %o', msg, fields),
  };
}

// libp2p's listen failure embeds each address's stack trace in its message; a start-up error
// is read by a person, on one line.
export const withoutStacks = (message: string): string =>
  message
    .split('\n')
    .map((line) => line.trim())
    .filter((line) => line && !line.startsWith('at '))
    .join(' ');
