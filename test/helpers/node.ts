import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { setTimeout as sleep } from 'node:timers/promises';
import { readKey } from '../../runtime/home.js';
import type { KeyPair } from '../../runtime/crypto/keys.js';

export const CLI = fileURLToPath(new URL('../../dist/cli/main.js', import.meta.url));

export function tempHome(prefix = 'dms-test-'): string {
  return mkdtempSync(join(tmpdir(), prefix));
}

/**
 * A running test node, in a process of its own (startNode) or in the test's process
 * (startLocalNode in local-node.ts). What only a real process has is on NodeProcess.
 */
export interface TestNode {
  home: string;
  url: string;
  did: string;
  peerId: string;
  /** Everything the node logged so far (a process: its stderr and stdout). */
  logs(): string;
  operator(): KeyPair;
  /** Stops the node (a process: SIGTERM) and waits until it has; a process resolves to its exit code. */
  stop(): Promise<number | null>;
}

export interface NodeProcess extends TestNode {
  pid: number;
  proc: ChildProcess;
  /** SIGKILL, as a crash would. */
  kill(): Promise<void>;
}

export interface StartOptions {
  home?: string;
  env?: Record<string, string>;
  args?: string[];
  /** Leave out `--port 0`, so the port comes from the config or environment. */
  configuredPort?: boolean;
  /** Written to <home>/dms_config.json before start. */
  config?: unknown;
  /** Working directory of the node process (default: its home). */
  cwd?: string;
  timeoutMs?: number;
  /** The `dms` entry point to run (default: this checkout's dist/cli/main.js). */
  cli?: string;
  /** Node's own flags for the process, before the entry point (e.g. `--import` a preload). */
  nodeArgs?: string[];
}

/** Environment that keeps test nodes on loopback and quiet. */
export const TEST_ENV: Record<string, string> = {
  DMS_NETWORK_LISTEN_ADDRESSES: '/ip4/127.0.0.1/tcp/0',
  DMS_NETWORK_BOOTSTRAP_PEERS: '',
};

/**
 * Starts `dms start --port 0` as a real process and waits until it answers /health. With
 * DMS_PROFILE_DIR set, each node writes a V8 CPU profile there when it exits (for benches).
 */
export async function startNode(opts: StartOptions = {}): Promise<NodeProcess> {
  const home = opts.home ?? tempHome();
  if (opts.config !== undefined) writeFileSync(join(home, 'dms_config.json'), JSON.stringify(opts.config));
  const portArgs = opts.configuredPort ? [] : ['--port', '0'];
  const proc = spawn(process.execPath, [...(process.env.DMS_PROFILE_DIR ? ['--cpu-prof', `--cpu-prof-dir=${process.env.DMS_PROFILE_DIR}`] : []), ...(opts.nodeArgs ?? []), opts.cli ?? CLI, '--home', home, 'start', ...portArgs, '--log-level', 'warn', ...(opts.args ?? [])], {
    env: { ...process.env, ...TEST_ENV, ...opts.env },
    stdio: ['ignore', 'pipe', 'pipe'],
    cwd: opts.cwd ?? home,
  });
  let stderr = '';
  proc.stderr!.on('data', (d) => (stderr += d));
  proc.stdout!.on('data', (d) => (stderr += d));
  const exited = new Promise<number | null>((resolve) => proc.once('exit', (code) => resolve(code)));
  let exitCode: number | null | undefined;
  exited.then((c) => (exitCode = c));
  // A node that ends after start-up other than by stop() or kill() (a crash, a test's own signal
  // or `dms stop`) has its last output printed once its pipes have closed: a test that did not
  // expect it sees only refused connections, and that output is the only account of why.
  let started = false;
  let ending = false;
  proc.once('close', (code, signal) => {
    if (started && !ending) process.stderr.write(`node ${proc.pid} (${home}) exited without stop() or kill(), code ${code}, signal ${signal}; its last output:\n${stderr.slice(-8000)}\n`);
  });

  const deadline = Date.now() + (opts.timeoutMs ?? 20_000);
  const runtimeFile = join(home, 'node.json');
  for (;;) {
    if (exitCode !== undefined) throw new Error(`node exited with ${exitCode} during start-up:\n${stderr}`);
    if (Date.now() > deadline) {
      proc.kill('SIGKILL');
      throw new Error(`node did not start within the deadline:\n${stderr}`);
    }
    if (existsSync(runtimeFile)) {
      const info = JSON.parse(readFileSync(runtimeFile, 'utf8'));
      if (info.pid === proc.pid) {
        const ok = await fetch(`${info.url}/health`).then((r) => r.ok, () => false);
        if (ok) {
          started = true;
          return {
            home,
            url: info.url,
            pid: info.pid,
            did: info.did,
            peerId: info.peer_id,
            proc,
            logs: () => stderr,
            operator: () => readKey(join(home, 'keys', 'operator.json')),
            stop: async () => {
              ending = true;
              if (exitCode === undefined) proc.kill('SIGTERM');
              return exited;
            },
            kill: async () => {
              ending = true;
              if (exitCode === undefined) proc.kill('SIGKILL');
              await exited;
            },
          };
        }
      }
    }
    await sleep(50);
  }
}

/** Runs the CLI to completion, from a neutral directory so no stray ./dms_config.json is read. */
export function runCli(
  args: string[],
  env: Record<string, string> = {},
  cwd: string = tmpdir(),
  /** Killed (SIGKILL, exit code null) when it has not exited by then. */
  killAfterMs?: number,
): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const proc = spawn(process.execPath, [...(process.env.DMS_PROFILE_DIR ? ['--cpu-prof', `--cpu-prof-dir=${process.env.DMS_PROFILE_DIR}`] : []), CLI, ...args], { env: { ...process.env, ...TEST_ENV, ...env }, stdio: ['ignore', 'pipe', 'pipe'], cwd });
    let stdout = '';
    let stderr = '';
    const timer = killAfterMs === undefined ? undefined : setTimeout(() => proc.kill('SIGKILL'), killAfterMs);
    proc.stdout.on('data', (d) => (stdout += d));
    proc.stderr.on('data', (d) => (stderr += d));
    proc.on('exit', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
  });
}

export function removeHome(home: string): void {
  rmSync(home, { recursive: true, force: true });
}
