import { existsSync, readFileSync, statSync } from 'node:fs';
import type { Command } from 'commander';
import * as z from 'zod';
import { coerceText, ConfigSchema, ENV_KEYS, getKey, redact, schemaAt, SECRET_KEYS, setKey } from '../../runtime/config.js';
import { configFilePath, keySource, loadConfig } from '../../runtime/config-file.js';
import { errorText } from '../../runtime/errors.js';
import { homePaths } from '../../runtime/home.js';
import { writeJsonAtomic } from '../../runtime/files.js';
import { describeIssues } from '../../runtime/issues.js';
import { CliError, globals, homeOf, output, runningNode, warnIgnoredConfig } from '../context.js';

type Json = null | boolean | number | string | Json[] | { [k: string]: Json };
type JsonObject = { [k: string]: Json };

const REDACTED = '[redacted]';

export function registerConfigCommands(program: Command): void {
  const config = program
    .command('config')
    .description('read and change the node configuration (a change applies on the next `dms start`)');

  config
    .command('get')
    .description("print the value of a key in effect (defaults < file < DMS_* environment; the running node's start flags) and, on stderr, where it came from; secrets are redacted")
    .argument('<key>', 'dotted key, e.g. rest.port, or a section, e.g. rest')
    .action((key: string, _opts, cmd: Command) => {
      const schema = requireKey(key);
      const home = homeOf(cmd);
      const load = { home, file: globals(cmd).config };
      let value = getKey(effectiveConfig(cmd), key);
      let from: string | undefined = objectShape(schema) ? undefined : keySource(load, key);
      // The running node took it from its start flags or environment: that is what is in effect.
      const running = runningNode(home);
      const override = running?.overrides?.find((o) => o.key === key);
      if (running && override && !isSecret(key)) {
        const file = from === 'default' || from?.startsWith('DMS_') ? undefined : from;
        from = `${override.from} of the node running now (pid ${running.pid})${file ? `; ${file} says ${JSON.stringify(value)}` : ''}`;
        value = override.value;
      }
      output(cmd, { key, value, ...(from ? { source: from } : {}) }, typeof value === 'string' ? value : JSON.stringify(value, null, 2));
      if (from && !globals(cmd).json) process.stderr.write(`# from ${from}\n`);
    });

  config
    .command('set')
    .description("write a key into the home's dms_config.json, keeping the other keys; the node reads it on its next start")
    .argument('<key>', 'dotted key, e.g. rest.port')
    .argument('<value>', 'the value: booleans true/false, lists comma-separated or as a JSON array, null where allowed')
    .action((key: string, text: string, _opts, cmd: Command) => {
      const value = parseValue(key, text);
      const home = homeOf(cmd);
      const explicit = globals(cmd).config;
      const target = explicit ?? homePaths(home).config;
      // The home's file is the home's: a dms_config.json of the directory the command runs in
      // (a checkout's, say) is never copied into it. A node of a home without a file read that
      // one; once the home has its own, it reads only its own, which the notes say.
      const source = configFilePath({ home, file: explicit });
      const settings = existsSync(target) ? readSettings(target) : {};
      setKey(settings, key, value);
      const check = ConfigSchema.safeParse(settings);
      if (!check.success) throw new CliError(`${target}: ${describeIssues(check.error)}`);
      writeSettings(target, settings);

      const shown = isSecret(key) ? REDACTED : value;
      const override = Object.entries(ENV_KEYS).find(([name, k]) => k === key && process.env[name] !== undefined)?.[0];
      const running = runningNode(home);
      const notes = [`written to ${target}; it takes effect on the next \`dms start\``];
      if (source && source !== target) notes.push(`(${source}, which this home read until now, is no longer read for it: the home's own file holds only what is set there)`);
      if (running) notes.push(`the node running now (pid ${running.pid}) keeps its current value until it is restarted`);
      if (override) notes.push(`note: ${override} is set in this environment and overrides the file`);
      output(
        cmd,
        { key, value: shown, file: target, restart_required: true, ...(override ? { overridden_by: override } : {}) },
        [`${key} = ${JSON.stringify(shown)}`, ...notes].join('\n'),
      );
    });

  config
    .command('list')
    .description('print the whole effective configuration, secrets redacted')
    .action((_opts, cmd: Command) => {
      const home = homeOf(cmd);
      const file = configFilePath({ home, file: globals(cmd).config });
      const cfg = effectiveConfig(cmd);
      const lines = [`# ${file ? `file ${file}` : 'no config file: defaults'}, plus DMS_* environment`];
      for (const [key, value] of flatten(cfg as unknown as Json)) lines.push(`${key} = ${JSON.stringify(value)}`);
      output(cmd, { file: file ?? null, config: cfg }, lines.join('\n'));
    });
}

function effectiveConfig(cmd: Command) {
  return redact(loadConfig({ home: homeOf(cmd), file: globals(cmd).config, onIgnored: warnIgnoredConfig }));
}

/** Unknown keys name the nearest section's keys, since the usual mistake is a typo. */
function requireKey(key: string): z.ZodType {
  const schema = schemaAt(key);
  if (schema) return schema;
  const parts = key.split('.');
  let section = '';
  for (let i = parts.length - 1; i > 0; i--) {
    const prefix = parts.slice(0, i).join('.');
    if (schemaAt(prefix)) {
      section = prefix;
      break;
    }
  }
  const keys = Object.keys(objectShape(section ? schemaAt(section)! : ConfigSchema) ?? {});
  const where = section ? `keys under ${section}` : 'sections';
  throw new CliError(`unknown configuration key '${key}' (${where}: ${keys.join(', ')})`);
}

/** The text of `config set` as the JSON value its key takes, checked against the key's schema. */
function parseValue(key: string, text: string): Json {
  const schema = requireKey(key);
  const shape = objectShape(schema);
  if (shape) {
    throw new CliError(`'${key}' is a section, not a value; set one of its keys: ${Object.keys(shape).map((k) => `${key}.${k}`).join(', ')}`);
  }
  let value: Json;
  // coerceText knows no null for nullable booleans (rest.allow_unsigned); null restores "automatic".
  if (text.trim() === 'null' && schema.safeParse(null).success) value = null;
  else {
    try {
      value = coerceText(key, text);
    } catch (e) {
      throw new CliError(errorText(e));
    }
  }
  const check = schema.safeParse(value);
  if (!check.success) throw new CliError(describeIssues(check.error, { prefix: key }));
  return value;
}

function objectShape(schema: z.ZodType): Record<string, z.ZodType> | undefined {
  let cur: z.ZodType = schema;
  while (cur instanceof z.ZodDefault || cur instanceof z.ZodPrefault || cur instanceof z.ZodOptional || cur instanceof z.ZodNullable) {
    cur = cur.unwrap() as z.ZodType;
  }
  return cur instanceof z.ZodObject ? (cur.shape as Record<string, z.ZodType>) : undefined;
}

const isSecret = (key: string): boolean => (SECRET_KEYS as readonly string[]).some((s) => s === key || s.startsWith(`${key}.`));

/**
 * The file's settings as written, without validating them first: a file with one bad value
 * must still be fixable with `config set` (the result is validated before it is written).
 */
function readSettings(path: string): JsonObject {
  let data: unknown;
  try {
    data = JSON.parse(readFileSync(path, 'utf8'));
  } catch (e) {
    throw new CliError(`${path}: not valid JSON (${(e as Error).message}); fix or remove the file`);
  }
  if (data === null || typeof data !== 'object' || Array.isArray(data)) throw new CliError(`${path}: must hold a JSON object`);
  return data as JsonObject;
}

/** Atomic replace, so a node starting meanwhile never reads half a file; secrets make it owner-only by default. */
function writeSettings(path: string, settings: JsonObject): void {
  writeJsonAtomic(path, settings, existsSync(path) ? statSync(path).mode & 0o777 : 0o600);
}

/** Leaf keys in schema order; arrays are values, not sections. */
function* flatten(value: Json, prefix = ''): Generator<[string, Json]> {
  if (value !== null && typeof value === 'object' && !Array.isArray(value)) {
    for (const [k, v] of Object.entries(value)) yield* flatten(v, prefix ? `${prefix}.${k}` : k);
  } else {
    yield [prefix, value];
  }
}
