/**
 * Where a node's configuration comes from, and in what order: the defaults of ./config.ts, then
 * one file (`--config`, the home's dms_config.json, or one in the working directory that only its
 * owner could have written), then DMS_* environment variables, then flags.
 */
import { closeSync, existsSync, fstatSync, openSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { type Config, CONFIG_FILE, ConfigSchema, coerceText, configError, ENV_KEYS, getKey, type Json, type JsonObject, schemaAt, setKey } from './config.js';
import { describeIssues } from './issues.js';
import { distrustReason } from './ownership.js';

/** Reads a config file; a missing file is `{}`, a malformed one stops start-up naming the file. */
export function readConfigFile(path: string): JsonObject {
  if (!existsSync(path)) return {};
  return parseConfigText(path, readFileSync(path, 'utf8'));
}

function parseConfigText(path: string, text: string): JsonObject {
  let data: unknown;
  try {
    data = JSON.parse(text);
  } catch (e) {
    throw configError(path, `not valid JSON (${(e as Error).message})`);
  }
  if (data === null || typeof data !== 'object' || Array.isArray(data)) throw configError(path, 'must hold a JSON object');
  const check = ConfigSchema.safeParse(data);
  if (!check.success) throw configError(path, describeIssues(check.error));
  return data as JsonObject;
}

/** A working-directory config file that was not read, and why. */
export interface IgnoredConfigFile {
  path: string;
  reason: string;
}

/** The one line telling the user a working-directory config file was ignored. */
export const ignoredConfigText = (i: IgnoredConfigFile): string =>
  `ignoring ${i.path}: ${i.reason}; a ${CONFIG_FILE} in the working directory is read only when owned by you and writable by nobody else`;

/**
 * Reads the working directory's config file through one open descriptor, so the file checked
 * is the file read (no swapping it between the two in a shared directory).
 */
function readWorkingDirFile(path: string): { data: JsonObject } | { ignored: IgnoredConfigFile } {
  const fd = openSync(path, 'r');
  try {
    const reason = distrustReason(fstatSync(fd));
    if (reason) return { ignored: { path, reason } };
    return { data: parseConfigText(path, readFileSync(fd, 'utf8')) };
  } finally {
    closeSync(fd);
  }
}

export interface LoadOptions {
  /** The node's home directory. */
  home: string;
  /** `--config FILE`; otherwise the home's dms_config.json, else the working directory's. */
  file?: string;
  env?: NodeJS.ProcessEnv;
  /** Command-line overrides as dotted keys. */
  flags?: Record<string, Json | undefined>;
  cwd?: string;
  /** Told when a dms_config.json in the working directory is not read, and why. */
  onIgnored?: (file: IgnoredConfigFile) => void;
}

type Source = { kind: 'explicit' | 'home' | 'cwd'; path: string } | { kind: 'none' };

function configSource(opts: Pick<LoadOptions, 'home' | 'file' | 'cwd'>): Source {
  if (opts.file) return { kind: 'explicit', path: opts.file };
  const inHome = join(opts.home, CONFIG_FILE);
  if (existsSync(inHome)) return { kind: 'home', path: inHome };
  const inCwd = join(opts.cwd ?? process.cwd(), CONFIG_FILE);
  return existsSync(inCwd) ? { kind: 'cwd', path: inCwd } : { kind: 'none' };
}

/** Which file a node reads its config from (a working-directory file it may not trust is none). */
export function configFilePath(opts: Pick<LoadOptions, 'home' | 'file' | 'cwd'>): string | undefined {
  const source = configSource(opts);
  if (source.kind === 'none') return undefined;
  if (source.kind === 'cwd' && distrustReason(statSync(source.path))) return undefined;
  return source.path;
}

/**
 * Where the value `loadConfig(opts)` gives `key` comes from: `opts.flags`' name for it (as
 * `flagNames` spells it), the DMS_* variable, the file, or `default`. For a leaf key.
 */
export function keySource(opts: LoadOptions, key: string, flagNames: Record<string, string> = {}): string {
  if (opts.flags?.[key] !== undefined) return flagNames[key] ?? `--${key}`;
  const env = opts.env ?? process.env;
  const name = Object.entries(ENV_KEYS).find(([n, k]) => k === key && env[n] !== undefined)?.[0];
  if (name) return name;
  const path = configFilePath(opts);
  if (path) {
    try {
      if (getKey(JSON.parse(readFileSync(path, 'utf8')) as JsonObject, key) !== undefined) return path;
    } catch {
      // loadConfig has said what is wrong with the file
    }
  }
  return 'default';
}

/** defaults < file < DMS_* environment < flags; an invalid value throws naming its key and source. */
export function loadConfig(opts: LoadOptions): Config {
  if (opts.file && !existsSync(opts.file)) throw configError(opts.file, 'config file not found');
  const source = configSource(opts);
  let file: string | undefined;
  let merged: JsonObject = {};
  if (source.kind === 'cwd') {
    const read = readWorkingDirFile(source.path);
    if ('ignored' in read) opts.onIgnored?.(read.ignored);
    else [file, merged] = [source.path, structuredClone(read.data)];
  } else if (source.kind !== 'none') {
    [file, merged] = [source.path, structuredClone(readConfigFile(source.path))];
  }
  const env = opts.env ?? process.env;
  for (const [name, key] of Object.entries(ENV_KEYS)) {
    const text = env[name];
    if (text === undefined) continue;
    const value = coerceText(key, text, `${name} (${key})`);
    const check = schemaAt(key)!.safeParse(value);
    if (!check.success) throw configError(name, `'${text}' is not a valid ${key}: ${describeIssues(check.error)}`);
    setKey(merged, key, value);
  }
  for (const [key, value] of Object.entries(opts.flags ?? {})) {
    if (value === undefined) continue;
    const schema = schemaAt(key);
    if (!schema) throw configError(`--${key}`, 'no such configuration key');
    const check = schema.safeParse(value);
    if (!check.success) throw configError(`--${key}`, describeIssues(check.error));
    setKey(merged, key, value);
  }
  const result = ConfigSchema.safeParse(merged);
  if (!result.success) throw configError(file ?? 'config', describeIssues(result.error));
  return result.data;
}

