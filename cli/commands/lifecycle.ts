import { spawn } from 'node:child_process';
import { closeSync, existsSync, openSync, readSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { type Command, Option } from 'commander';
import { coerceText, type Config, ENV_KEYS, getKey, type Json, SECRET_KEYS } from '../../runtime/config.js';
import { loadConfig, type LoadOptions } from '../../runtime/config-file.js';
import type { DeviceSettings, DeviceSettingsPatch } from '../../behaviors/jobs/schema.js';
import { errorText } from '../../runtime/errors.js';
import { type ConfigOverride, homePaths, initHome } from '../../runtime/home.js';
import { restPortProblem } from '../../runtime/port-holder.js';
import { codeCacheUse, saveCodeCache } from '../../runtime/code-cache.js';
import { raiseMallocThresholds } from '../../runtime/malloc-thresholds.js';
import { releaseYoungGeneration } from '../../runtime/young-generation.js';
import { createLogger, LOG_FORMATS, type LogFormat } from '../../runtime/log.js';
import { passphraseFromEnv } from '../../runtime/crypto/sealed.js';
import { CliError, globals, homeOf, isAlive, output, runningNode, warnIgnoredConfig } from '../context.js';
import { newKeyPassphrase, unlockKeys } from '../passphrase.js';
import { restFor } from '../rest.js';
import { type OnboardFlags, onboardFlags, settingsFrom, shareText } from './onboard.js';
import { makeDirs } from '../../runtime/files.js';

const DETACH_TIMEOUT_MS = 30_000;
const STOP_TIMEOUT_MS = 20_000;
/**
 * A started node writes its code cache this long after it answers (runtime/code-cache.ts): by
 * then it has compiled what a start runs, and the write (~6 MB, tens of ms) is not in the way of
 * whoever waited for it to be healthy.
 */
const CODE_CACHE_AFTER_START_MS = 2_000;
// Lines of this run's log shown when a detached start fails; the whole log stays in the file.
const DETACH_LOG_LINES = 10;
// Bytes of this run's log read for them: a start-up that logs more is cut to its end.
const DETACH_LOG_BYTES = 64 * 1024;

export interface StartOptions {
  port?: number;
  host?: string;
  dev?: boolean;
  devPayloads?: boolean;
  debug?: boolean;
  logLevel?: string;
  logFormat?: LogFormat;
  listen?: string[];
  detach?: boolean;
}

const parsePort = (v: string): number => {
  if (!/^\d+$/.test(v) || Number(v) > 65535) throw new CliError(`--port: '${v}' is not a port number (0-65535)`);
  return Number(v);
};

// Comma-separated like DMS_NETWORK_LISTEN_ADDRESSES; each is checked as a multiaddr at start.
const parseListen = (v: string): string[] => coerceText('network.ListenAddresses', v, '--listen') as string[];

/**
 * The configuration `dms start` runs with: defaults < file < DMS_* environment < its flags.
 * Exported so a node started in process (tests, embedders) reads it exactly as the command does.
 */
export function startConfig(load: Omit<LoadOptions, 'flags'>, opts: StartOptions): Config {
  return loadConfig({ ...load, flags: startFlags(opts) });
}

/** The settings `dms start`'s flags set, as dotted keys (undefined: not given). */
function startFlags(opts: StartOptions): Record<string, Json | undefined> {
  return {
    'rest.port': opts.port,
    'rest.addr': opts.host,
    'network.ListenAddresses': opts.listen,
    'general.debug': opts.dev || opts.devPayloads || opts.debug ? true : undefined,
    'general.dev_payloads': opts.devPayloads ? true : undefined,
    'general.log_level': opts.logLevel,
  };
}

/** The flag a person typed for each key startFlags sets. */
export const START_FLAG_NAMES: Record<string, string> = {
  'rest.port': '--port',
  'rest.addr': '--host',
  'network.ListenAddresses': '--listen',
  'general.debug': '--dev',
  'general.dev_payloads': '--dev-payloads',
  'general.log_level': '--log-level',
};

/** What this start takes from its flags and the environment over the file, for the runtime file. */
function overridesOf(opts: StartOptions, config: Config): ConfigOverride[] {
  const flags = startFlags(opts);
  const out: ConfigOverride[] = [];
  const taken = new Set<string>();
  for (const [key, value] of Object.entries(flags)) {
    if (value === undefined) continue;
    out.push({ key, value: getKey(config, key), from: START_FLAG_NAMES[key] });
    taken.add(key);
  }
  for (const [name, key] of Object.entries(ENV_KEYS)) {
    if (process.env[name] === undefined || taken.has(key) || SECRET_KEYS.includes(key as never)) continue;
    out.push({ key, value: getKey(config, key), from: name });
  }
  return out;
}

/**
 * The share onboarded at init: through the running node when there is one, else written to the
 * home's store (by the same rules) for the node that starts later.
 */
async function onboardAtInit(cmd: Command, home: string, patch: DeviceSettingsPatch): Promise<DeviceSettings> {
  if (runningNode(home)) return restFor(cmd).put<DeviceSettings>('/api/v1/device/config', patch);
  const config = loadConfig({ home, file: globals(cmd).config, onIgnored: warnIgnoredConfig });
  // Loaded here so every other command starts without the storage's dependency tree.
  const { writeDeviceSettings } = await import('../../daemon/device-settings.js');
  try {
    return await writeDeviceSettings(home, config, patch);
  } catch (e) {
    throw new CliError(errorText(e));
  }
}

export function registerNodeCommands(program: Command): void {
  onboardFlags(
    program
      .command('init')
      .description('create the node home: configuration directory, node key and operator key (existing keys are kept); with --onboard, also offer a share of the machine')
      .option('--onboard', 'also onboard a share (--cpu, --memory, …, as `dms onboard` takes them), for scripted set-up'),
  ).action(async (opts: OnboardFlags & { onboard?: boolean }, cmd: Command) => {
      const home = homeOf(cmd);
      const paths = homePaths(home);
      // Sealed existing keys need their passphrase; new keys get DMS_PASSPHRASE, a passphrase
      // asked at a terminal, or none (stored 0600) when nobody can be asked.
      await unlockKeys([paths.nodeKey, paths.operatorKey]);
      const making = !existsSync(paths.nodeKey) || !existsSync(paths.operatorKey);
      const { patch } = settingsFrom(opts);
      if (!opts.onboard && Object.keys(patch).length) throw new CliError('--cpu, --memory, --label … onboard a share: add --onboard (or run `dms onboard` later)');
      if (opts.onboard && !patch.onboarded) throw new CliError('--onboard needs the share: --cpu and --memory (e.g. --cpu 1.5 --memory 4GiB)');
      const r = initHome(home, making ? await newKeyPassphrase() : passphraseFromEnv());
      const onboarded = opts.onboard ? await onboardAtInit(cmd, home, patch) : undefined;
      const data = { home, node_did: r.node.did, peer_id: r.node.peerId, operator_did: r.operator.did, created: r.created, encrypted: r.encrypted, ...(onboarded ? { device: onboarded } : {}) };
      const said = (made: boolean) => (made ? 'created' : 'kept existing');
      output(
        cmd,
        data,
        [
          `home      ${home}`,
          `node      ${r.node.did} (${said(r.created.node)})`,
          `peer id   ${r.node.peerId}`,
          `operator  ${r.operator.did} (${said(r.created.operator)})`,
          keysAtRest(r.encrypted),
          ...(onboarded ? [`offered   ${onboarded.onboarded ? shareText(onboarded.onboarded) : 'nothing'}`] : []),
        ].join('\n'),
      );
    });

  program
    .command('start')
    .description('run the node in the foreground (logs on stderr); --detach returns once it is healthy')
    .option('-p, --port <port>', 'REST port (0 picks a free one)', parsePort)
    .option('--host <addr>', 'REST listen address')
    .option('--listen <multiaddrs>', 'libp2p listen addresses, comma-separated (network.ListenAddresses), e.g. /ip4/0.0.0.0/tcp/9001', parseListen)
    .option('--dev', 'dev mode: the dev stream (dms dev watch) and page (/dev) are on, /config shows the redacted config')
    .option('--dev-payloads', 'dev mode, and the dev stream shows payloads (they may hold secrets)')
    .addOption(new Option('--debug', 'the same as --dev').hideHelp())
    .addOption(new Option('--log-level <level>', 'log level').choices(['trace', 'debug', 'info', 'warn', 'error', 'silent']))
    .addOption(new Option('--log-format <format>', 'log lines: pretty (default at a terminal) or json (default otherwise)').choices(LOG_FORMATS))
    .option('-d, --detach', 'start in the background and return once healthy')
    .action(async (opts: StartOptions, cmd: Command) => {
      const home = homeOf(cmd);
      const running = runningNode(home);
      if (running) throw new CliError(`a node is already running from ${home} (pid ${running.pid}, ${running.url})`);
      // Asked here, before anything runs in the background: a node never waits on a prompt.
      await unlockKeys([homePaths(home).nodeKey, homePaths(home).operatorKey]);
      // Read before detaching too, so whoever starts the node sees an ignored file and a bad value.
      const config = startConfig({ home, file: globals(cmd).config, onIgnored: warnIgnoredConfig }, opts);
      // Before anything starts (storage, network, executors take seconds): a taken REST port is
      // said at once, with the way out, rather than after all of it as the last of its log.
      const busy = await restPortProblem(config.rest.addr, config.rest.port);
      if (busy) throw new CliError(busy);
      if (opts.detach) return detach(cmd, home);
      const log = createLogger(config.general.log_level, { format: opts.logFormat });
      // Loaded here so every other command starts without the node's whole dependency tree.
      const { DmsNode } = await import('../../daemon/node.js');
      const node = await DmsNode.start({ home, config, log, overrides: overridesOf(opts, config) });
      // It serves: work may now make garbage fast (runtime/young-generation.ts), and freed heap
      // is kept for the next reads rather than returned page by page (runtime/malloc-thresholds.ts).
      releaseYoungGeneration();
      raiseMallocThresholds();
      log.debug({ codeCache: codeCacheUse() }, 'the program was loaded with this code cache');
      setTimeout(() => saveCodeCache('node'), CODE_CACHE_AFTER_START_MS).unref();
      let stopping = false;
      const shutdown = (signal: string) => {
        if (stopping) {
          log.warn({ signal }, 'second signal: exiting at once');
          process.exit(130);
        }
        stopping = true;
        log.info({ signal }, 'shutting down');
        node.stop().then(
          () => log.flush(() => process.exit(0)),
          (e) => {
            log.error({ err: e }, 'shutdown failed');
            log.flush(() => process.exit(1));
          },
        );
      };
      process.on('SIGINT', () => shutdown('SIGINT'));
      process.on('SIGTERM', () => shutdown('SIGTERM'));
    });

  program
    .command('stop')
    .description('stop the node running from this home')
    .action(async (_opts, cmd: Command) => {
      const home = homeOf(cmd);
      const running = runningNode(home);
      if (!running) throw new CliError(`no node is running from ${home}`);
      process.kill(running.pid, 'SIGTERM');
      const deadline = Date.now() + STOP_TIMEOUT_MS;
      while (isAlive(running.pid)) {
        if (Date.now() > deadline) throw new CliError(`node (pid ${running.pid}) did not stop within ${STOP_TIMEOUT_MS / 1000} s`);
        await sleep(100);
      }
      output(cmd, { stopped: true, pid: running.pid }, `node stopped (pid ${running.pid})`);
    });

  program
    .command('status')
    .description('is a node running from this home, and is it healthy')
    .action(async (_opts, cmd: Command) => {
      const home = homeOf(cmd);
      const running = runningNode(home);
      if (!running) throw new CliError(`no node is running from ${home}`);
      let healthy = false;
      try {
        const res = await fetch(`${running.url}/health`, { signal: AbortSignal.timeout(5000) });
        healthy = res.ok;
      } catch {
        healthy = false;
      }
      const data = { running: true, healthy, ...running };
      output(
        cmd,
        data,
        [
          `node      ${healthy ? 'running, healthy' : 'running, NOT answering /health'}`,
          `pid       ${running.pid}`,
          `url       ${running.url}`,
          `did       ${running.did}`,
          `peer id   ${running.peer_id}`,
          `since     ${running.started_at}`,
        ].join('\n'),
      );
      if (!healthy) process.exitCode = 1;
    });
}

/** How the keys are kept, in words: whether a passphrase protects them. */
function keysAtRest(e: { node: boolean; operator: boolean }): string {
  if (e.node && e.operator) return 'keys are encrypted with the passphrase (scrypt + AES-256-GCM); `dms start` needs DMS_PASSPHRASE or a terminal to ask on';
  const plain = 'stored unencrypted, readable only by their owner (mode 0600); set DMS_PASSPHRASE (or run `dms init` at a terminal) to encrypt new keys';
  if (!e.node && !e.operator) return `keys are ${plain}`;
  return `the ${e.node ? 'operator' : 'node'} key is ${plain}; the other is encrypted`;
}

/** Re-runs `start` in the background with its output in the home's log, and waits until healthy. */
async function detach(cmd: Command, home: string): Promise<void> {
  const paths = homePaths(home);
  makeDirs(paths.logs);
  const logFile = join(paths.logs, 'node.log');
  // Earlier runs stay in the file; a failure of this one shows only what this one wrote.
  const runStart = existsSync(logFile) ? statSync(logFile).size : 0;
  const fd = openSync(logFile, 'a');
  const args = process.argv.slice(2).filter((a) => a !== '--detach' && a !== '-d');
  // The entry point this process runs (dist/cli/main.js, or the `dms` link to it): this code is
  // bundled into it, so no path relative to its own module would name it.
  const entry = process.argv[1];
  const child = spawn(process.execPath, [...process.execArgv, entry, ...args], {
    detached: true,
    stdio: ['ignore', fd, fd],
    env: { ...process.env, DMS_HOME: home },
  });
  closeSync(fd);
  let exited: number | null = null;
  child.on('exit', (code) => (exited = code ?? 1));
  child.unref();
  const deadline = Date.now() + DETACH_TIMEOUT_MS;
  while (Date.now() < deadline) {
    if (exited !== null) {
      const tail = logSince(logFile, runStart);
      throw new CliError(`node exited during start-up (code ${exited})${tail ? `; last log lines:\n${tail}` : `; see ${logFile}`}`);
    }
    const info = runningNode(home);
    if (info && info.pid === child.pid) {
      try {
        const res = await fetch(`${info.url}/health`, { signal: AbortSignal.timeout(2000) });
        if (res.ok) {
          output(cmd, { ...info, log: logFile }, `node started in the background: ${info.url} (pid ${info.pid}, log ${logFile})`);
          return;
        }
      } catch {
        // not listening yet
      }
    }
    await sleep(100);
  }
  throw new CliError(`node did not become healthy within ${DETACH_TIMEOUT_MS / 1000} s; see ${logFile}`);
}

/** The last lines written to `file` after byte `offset`: what one detached run logged. */
function logSince(file: string, offset: number): string {
  const end = statSync(file).size;
  const from = Math.max(offset, end - DETACH_LOG_BYTES);
  const buf = Buffer.alloc(Math.max(0, end - from));
  const fd = openSync(file, 'r');
  try {
    readSync(fd, buf, 0, buf.length, from);
  } finally {
    closeSync(fd);
  }
  const lines = buf.toString('utf8').split('\n').filter((l) => l.trim());
  // A cut at DETACH_LOG_BYTES can start mid-line: that first piece is not a line.
  if (from > offset) lines.shift();
  return lines.slice(-DETACH_LOG_LINES).join('\n');
}
