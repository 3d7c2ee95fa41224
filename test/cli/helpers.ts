import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';

/** The real, built command: these tests exercise what a user runs, not the sources. */
export const CLI = fileURLToPath(new URL('../../dist/cli/main.js', import.meta.url));

export function assertBuilt(): void {
  if (!existsSync(CLI)) throw new Error(`${CLI} is missing: run \`npm run build\` before these tests (npm test does)`);
}

const homes: string[] = [];

/** A fresh home directory; removed by cleanupHomes. */
export function tempHome(label: string): string {
  const dir = mkdtempSync(join(tmpdir(), `dms-cli-${label}-`));
  homes.push(dir);
  return dir;
}

export function cleanupHomes(): void {
  for (const dir of homes.splice(0)) rmSync(dir, { recursive: true, force: true });
}

/** The caller's DMS_* variables must not leak into a node or command under test. */
export function cleanEnv(extra: Record<string, string> = {}): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries(process.env)) if (!k.startsWith('DMS_')) env[k] = v;
  return { ...env, ...extra };
}

export interface CliResult {
  code: number;
  stdout: string;
  stderr: string;
}

export interface RunOptions {
  env?: Record<string, string>;
  input?: string;
  /** Working directory; defaults to the home, so no ./dms_config.json of the repo is picked up. */
  cwd?: string;
}

/** Runs `dms --home <home> ...args` to completion. */
export function dms(home: string, args: string[], opts: RunOptions = {}): Promise<CliResult> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [CLI, '--home', home, ...args], {
      cwd: opts.cwd ?? home,
      env: cleanEnv(opts.env),
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    child.on('error', reject);
    child.on('close', (code) => resolve({ code: code ?? 1, stdout, stderr }));
    child.stdin.end(opts.input ?? '');
  });
}

/**
 * A home whose node serves REST only: network off, so test nodes neither bind the default
 * libp2p port (parallel test files would collide) nor wait on the network to start.
 */
export function prepareHome(label: string): string {
  const home = tempHome(label);
  writeFileSync(join(home, 'dms_config.json'), JSON.stringify({ network: { enabled: false }, general: { log_level: 'warn' } }, null, 2));
  return home;
}

export interface NodeInfo {
  pid: number;
  url: string;
  did: string;
  peer_id: string;
  started_at: string;
}

export interface TestNode {
  home: string;
  info: NodeInfo;
  stop(): Promise<void>;
}

const START_TIMEOUT_MS = 20_000;

/** Starts `dms start --port 0` in the foreground and waits until <home>/node.json is written and /health answers. */
export async function startNode(home: string): Promise<TestNode> {
  const child = spawn(process.execPath, [CLI, '--home', home, 'start', '--port', '0'], {
    cwd: home,
    env: cleanEnv(),
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  let stderr = '';
  child.stderr!.on('data', (d: Buffer) => (stderr += d.toString()));
  let exited: number | null = null;
  child.on('exit', (code) => (exited = code ?? 1));
  const deadline = Date.now() + START_TIMEOUT_MS;
  while (Date.now() < deadline) {
    if (exited !== null) throw new Error(`node exited during start-up (code ${exited}):\n${stderr}`);
    const info = readInfo(home);
    if (info && info.pid === child.pid && (await healthy(info.url))) {
      return { home, info, stop: () => stopChild(child) };
    }
    await sleep(50);
  }
  await stopChild(child);
  throw new Error(`node did not become healthy within ${START_TIMEOUT_MS} ms:\n${stderr}`);
}

export function readInfo(home: string): NodeInfo | undefined {
  try {
    return JSON.parse(readFileSync(join(home, 'node.json'), 'utf8')) as NodeInfo;
  } catch {
    return undefined;
  }
}

export async function healthy(url: string): Promise<boolean> {
  try {
    return (await fetch(`${url}/health`, { signal: AbortSignal.timeout(1000) })).ok;
  } catch {
    return false;
  }
}

export function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/** SIGTERM (the node's graceful stop), then SIGKILL if it hangs. */
async function stopChild(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const gone = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  child.kill('SIGTERM');
  const timer = setTimeout(() => child.kill('SIGKILL'), 10_000);
  await gone;
  clearTimeout(timer);
}

/** A port nothing listens on: bound and released by the OS just now. */
export async function freePort(): Promise<number> {
  const { createServer } = await import('node:net');
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.once('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const addr = srv.address();
      const port = typeof addr === 'object' && addr ? addr.port : 0;
      srv.close(() => resolve(port));
    });
  });
}
