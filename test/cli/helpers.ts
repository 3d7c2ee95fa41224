import { spawn } from 'node:child_process';
import { tempHome as suiteTempHome } from '../helpers/node.js';
import { existsSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

/** The real, built command: these tests exercise what a user runs, not the sources. */
export const CLI = fileURLToPath(new URL('../../dist/cli/main.js', import.meta.url));

export function assertBuilt(): void {
  if (!existsSync(CLI)) throw new Error(`${CLI} is missing: run \`npm run build\` before these tests (npm test does)`);
}

const homes: string[] = [];

/** A fresh home directory (the suite's tempHome); removed by cleanupHomes. */
export function tempHome(label: string): string {
  const dir = suiteTempHome(`dms-cli-${label}-`);
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

/** A port nothing listens on: the suite's one freePort. */
export { freePort } from '../helpers/network.js';
