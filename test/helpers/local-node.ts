import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { pino } from 'pino';
import { startConfig } from '../../cli/commands/lifecycle.js';
import { DmsNode } from '../../daemon/node.js';
import { readKey } from '../../runtime/home.js';
import { type StartOptions, type TestNode, TEST_ENV, tempHome } from './node.js';

/** What an in-process node accepts: a process's arguments and working directory have no meaning here. */
export type LocalStartOptions = Omit<StartOptions, 'args' | 'cwd' | 'cli'> & {
  /** `dms start --dev`. */
  dev?: boolean;
  /** Log level of the captured logger (default warn, as startNode's `--log-level warn`). */
  logLevel?: string;
};

export interface LocalNode extends TestNode {
  /** The composition root itself, for a test that needs a part (its system, its config). */
  node: DmsNode;
}

/**
 * Starts a node inside the test's own process with `DmsNode.start`, configured exactly as
 * `dms start --port 0` would be (same defaults < file < DMS_* < flags), on loopback libp2p and
 * REST. The network between such nodes is real libp2p over TCP; only the process is shared.
 * A test about processes (exit codes, signals, /proc, stderr) uses startNode instead: this one
 * has no pid, proc or kill, so the types keep it from pretending.
 */
export async function startLocalNode(opts: LocalStartOptions = {}): Promise<LocalNode> {
  const home = opts.home ?? tempHome();
  if (opts.config !== undefined) writeFileSync(join(home, 'dms_config.json'), JSON.stringify(opts.config));
  let logs = '';
  const logLevel = opts.logLevel ?? 'warn';
  const config = startConfig(
    { home, cwd: home, env: { ...process.env, ...TEST_ENV, ...opts.env } },
    { port: opts.configuredPort ? undefined : 0, logLevel, dev: opts.dev },
  );
  const log = pino({ name: 'dms', level: config.general.log_level, base: { home } }, { write: (line: string) => void (logs += line) });
  const node = await withTimeout(DmsNode.start({ home, config, log }), opts.timeoutMs ?? 20_000, () => `node did not start within the deadline:\n${logs}`);
  let stopped: Promise<void> | undefined;
  return {
    home,
    node,
    url: node.url,
    did: node.system.key.did,
    peerId: node.system.host,
    logs: () => logs,
    operator: () => readKey(join(home, 'keys', 'operator.json')),
    stop: async () => {
      stopped ??= node.stop();
      await stopped;
      return 0;
    },
  };
}

/**
 * Stops `node` (if it is not stopped yet) and starts it again on its home with `opts`, as its
 * operator restarts it: what a node picks up from its home is what such a test looks at.
 */
export async function restartLocalNode(node: LocalNode, opts: Omit<LocalStartOptions, 'home'> = {}): Promise<LocalNode> {
  await node.stop();
  return startLocalNode({ ...opts, home: node.home });
}

async function withTimeout<T>(p: Promise<T>, ms: number, what: () => string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  try {
    return await Promise.race([p, new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error(what())), ms)))]);
  } finally {
    clearTimeout(timer);
  }
}
