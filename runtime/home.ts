import { chmodSync, existsSync, readFileSync, writeFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { join, resolve } from 'node:path';
import * as z from 'zod';
import { anchorsPath, ensureAnchors } from './capability/anchors.js';
import { KeyPair } from './crypto/keys.js';
import { passphraseFromEnv, Sealed, seal, unseal } from './crypto/sealed.js';
import { DmsError } from './errors.js';
import { makeDirs } from './files.js';

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
  /** The replay cache's append-only log: envelopes accepted stay refused across restarts. */
  replayLog: string;
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
    replayLog: join(root, 'replay.log'),
  };
}

// A key file holds the seed in plain hex (mode 0600), or sealed under a passphrase (scrypt +
// AES-256-GCM, runtime/crypto/sealed.ts) with the did as associated data.
const KeyFile = z.union([
  z.object({ type: z.literal('ed25519'), seed: z.string().regex(/^[0-9a-f]{64}$/), did: z.string() }),
  z.object({ type: z.literal('ed25519'), sealed: Sealed, did: z.string() }),
]);

function parseKeyFile(path: string): z.infer<typeof KeyFile> {
  try {
    return KeyFile.parse(JSON.parse(readFileSync(path, 'utf8')));
  } catch (e) {
    throw new DmsError('invalid', `${path}: not a valid DMS key file (${(e as Error).message.split('\n')[0]})`);
  }
}

/** Whether a key file is encrypted, so a command can ask for the passphrase before reading it. */
export function isSealedKey(path: string): boolean {
  return existsSync(path) && 'sealed' in parseKeyFile(path);
}

/**
 * Reads a key file, plain or sealed; a damaged file is an error naming the file, never silently
 * replaced. A sealed file without a passphrase fails at once (never a prompt: callers that own a
 * terminal ask first), naming the file and how to unlock it.
 */
export function readKey(path: string, passphrase: string | undefined = passphraseFromEnv()): KeyPair {
  const parsed = parseKeyFile(path);
  let seed: Uint8Array;
  if ('sealed' in parsed) {
    if (!passphrase) throw new DmsError('unauthorized', `${path} is encrypted: set DMS_PASSPHRASE (or run the command in a terminal to be asked)`);
    seed = unseal(parsed.sealed, passphrase, parsed.did, path);
  } else {
    seed = Buffer.from(parsed.seed, 'hex');
  }
  const key = KeyPair.fromSeed(seed);
  if (key.did !== parsed.did) throw new DmsError('invalid', `${path}: the seed does not match the recorded did`);
  return key;
}

/** Writes a new key readable only by its owner, sealed when a passphrase is given; never overwrites. */
export function writeKey(path: string, key: KeyPair, passphrase?: string): void {
  if (existsSync(path)) throw new DmsError('conflict', `${path} already exists; refusing to overwrite a key`);
  makeDirs(join(path, '..'), 0o700);
  const secret = passphrase ? { sealed: seal(key.seed, passphrase, key.did) } : { seed: Buffer.from(key.seed).toString('hex') };
  const body = JSON.stringify({ type: 'ed25519', ...secret, did: key.did }, null, 2);
  writeFileSync(path, body + '\n', { mode: 0o600, flag: 'wx' });
  chmodSync(path, 0o600);
}

export function loadOrCreateKey(path: string, passphrase: string | undefined = passphraseFromEnv()): { key: KeyPair; created: boolean } {
  if (existsSync(path)) return { key: readKey(path, passphrase), created: false };
  const key = KeyPair.generate();
  writeKey(path, key, passphrase);
  return { key, created: true };
}

export interface InitResult {
  home: string;
  node: KeyPair;
  operator: KeyPair;
  created: { node: boolean; operator: boolean };
  /** Whether each key is stored sealed under a passphrase. */
  encrypted: { node: boolean; operator: boolean };
}

/**
 * Creates the home with its node and operator keys (sealed when a passphrase is given);
 * existing keys are kept as they are. The operator becomes the home's first root anchor.
 */
export function initHome(root: string, passphrase: string | undefined = passphraseFromEnv()): InitResult {
  const paths = homePaths(root);
  for (const dir of [paths.root, paths.keys, paths.logs, paths.data]) makeDirs(dir, 0o700);
  const node = loadOrCreateKey(paths.nodeKey, passphrase);
  const operator = loadOrCreateKey(paths.operatorKey, passphrase);
  ensureAnchors(anchorsPath(root), operator.key.did);
  return {
    home: root,
    node: node.key,
    operator: operator.key,
    created: { node: node.created, operator: operator.created },
    encrypted: { node: isSealedKey(paths.nodeKey), operator: isSealedKey(paths.operatorKey) },
  };
}

export interface RuntimeInfo {
  pid: number;
  url: string;
  did: string;
  peer_id: string;
  /** libp2p multiaddrs, each ending in /p2p/<peer_id>; empty when the network is off. */
  addrs: string[];
  started_at: string;
  /**
   * Settings this run took from its start flags or DMS_* environment, over its file: what
   * `dms config get` reports as in effect, with where it came from (absent from older nodes).
   */
  overrides?: ConfigOverride[];
}

/** One setting a node started with from outside its file: `--port` or `DMS_PORT`, say. */
export interface ConfigOverride {
  key: string;
  value: unknown;
  /** The flag (`--port`) or environment variable (`DMS_PORT`) it came from. */
  from: string;
}

export function readRuntimeInfo(root: string): RuntimeInfo | undefined {
  try {
    return JSON.parse(readFileSync(homePaths(root).runtime, 'utf8')) as RuntimeInfo;
  } catch {
    return undefined;
  }
}
