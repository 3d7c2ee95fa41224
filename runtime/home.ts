import { chmodSync, existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { join, resolve } from 'node:path';
import * as z from 'zod';
import { KeyPair } from './crypto/keys.js';
import { DmsError } from './errors.js';

/** `--home` > `DMS_HOME` > ~/.dms: several nodes can run side by side with their own homes. */
export function resolveHome(flag?: string, env: NodeJS.ProcessEnv = process.env): string {
  return resolve(flag || env.DMS_HOME || join(homedir(), '.dms'));
}

export interface HomePaths {
  root: string;
  config: string;
  keys: string;
  nodeKey: string;
  operatorKey: string;
  /** Written by a running node: its pid and REST URL, so commands find it. */
  runtime: string;
  logs: string;
  data: string;
}

export function homePaths(root: string): HomePaths {
  return {
    root,
    config: join(root, 'dms_config.json'),
    keys: join(root, 'keys'),
    nodeKey: join(root, 'keys', 'node.json'),
    operatorKey: join(root, 'keys', 'operator.json'),
    runtime: join(root, 'node.json'),
    logs: join(root, 'logs'),
    data: join(root, 'data'),
  };
}

const KeyFile = z.object({ type: z.literal('ed25519'), seed: z.string().regex(/^[0-9a-f]{64}$/), did: z.string() });

/** Reads a key file; a damaged file is an error naming the file, never silently replaced. */
export function readKey(path: string): KeyPair {
  let parsed: z.infer<typeof KeyFile>;
  try {
    parsed = KeyFile.parse(JSON.parse(readFileSync(path, 'utf8')));
  } catch (e) {
    throw new DmsError('invalid', `${path}: not a valid DMS key file (${(e as Error).message.split('\n')[0]})`);
  }
  const key = KeyPair.fromSeed(Buffer.from(parsed.seed, 'hex'));
  if (key.did !== parsed.did) throw new DmsError('invalid', `${path}: the seed does not match the recorded did`);
  return key;
}

/** Writes a new key readable only by its owner; refuses to overwrite an existing one. */
export function writeKey(path: string, key: KeyPair): void {
  if (existsSync(path)) throw new DmsError('conflict', `${path} already exists; refusing to overwrite a key`);
  mkdirSync(join(path, '..'), { recursive: true, mode: 0o700 });
  const body = JSON.stringify({ type: 'ed25519', seed: Buffer.from(key.seed).toString('hex'), did: key.did }, null, 2);
  writeFileSync(path, body + '\n', { mode: 0o600, flag: 'wx' });
  chmodSync(path, 0o600);
}

export function loadOrCreateKey(path: string): { key: KeyPair; created: boolean } {
  if (existsSync(path)) return { key: readKey(path), created: false };
  const key = KeyPair.generate();
  writeKey(path, key);
  return { key, created: true };
}

export interface InitResult {
  home: string;
  node: KeyPair;
  operator: KeyPair;
  created: { node: boolean; operator: boolean };
}

/** Creates the home with its node and operator keys; existing keys are kept as they are. */
export function initHome(root: string): InitResult {
  const paths = homePaths(root);
  for (const dir of [paths.root, paths.keys, paths.logs, paths.data]) mkdirSync(dir, { recursive: true, mode: 0o700 });
  const node = loadOrCreateKey(paths.nodeKey);
  const operator = loadOrCreateKey(paths.operatorKey);
  return { home: root, node: node.key, operator: operator.key, created: { node: node.created, operator: operator.created } };
}

export interface RuntimeInfo {
  pid: number;
  url: string;
  did: string;
  peer_id: string;
  /** libp2p multiaddrs, each ending in /p2p/<peer_id>; empty when the network is off. */
  addrs: string[];
  started_at: string;
}

export function readRuntimeInfo(root: string): RuntimeInfo | undefined {
  try {
    return JSON.parse(readFileSync(homePaths(root).runtime, 'utf8')) as RuntimeInfo;
  } catch {
    return undefined;
  }
}
