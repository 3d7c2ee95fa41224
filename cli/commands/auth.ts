import type { Command } from 'commander';
import { apiKeysPath, createApiKey, isRole, readApiKeys, revokeApiKey, ROLES } from '../../runtime/api-keys.js';
import { loadConfig } from '../../runtime/config-file.js';
import { CliError, globals, homeOf, output, runningNode } from '../context.js';
import { pickByPrefix, shortId } from '../ids.js';

/**
 * `dms auth …`: REST credentials. API keys live hashed in <home>/apikeys.json; a running node
 * re-reads the file, so keys work (or stop working) within a second. The key itself is shown
 * once, at creation.
 */
export function registerAuthCommands(program: Command): void {
  const auth = program.command('auth').description('REST credentials: API keys and bearer tokens, with roles admin, operator, viewer');
  const apikey = auth.command('apikey').description('API keys sent as X-API-Key (used when auth.api_key_enabled / DMS_API_KEY_ENABLED is on)');

  apikey
    .command('create')
    .description('create an API key with a role; prints the key once (it is stored only as a hash)')
    .requiredOption('--role <role>', `one of ${ROLES.join(', ')}`)
    .option('--name <name>', 'a label to recognise the key by in `list`')
    .action((opts: { role: string; name?: string }, cmd: Command) => {
      if (!isRole(opts.role)) throw new CliError(`--role: '${opts.role}' is not one of ${ROLES.join(', ')}`);
      const home = homeOf(cmd);
      const { key, record } = createApiKey(apiKeysPath(home), opts.role, opts.name ?? '');
      const { sha256: _hash, ...shown } = record;
      if (globals(cmd).json) return output(cmd, { key, ...shown });
      process.stdout.write(`${key}\n`);
      const enabled = loadConfig({ home, file: globals(cmd).config }).auth.api_key_enabled;
      process.stderr.write(
        `API key ${record.id} (${record.role}) created; store it now, it is not shown again.\n` +
          (enabled ? (runningNode(home) ? 'The running node accepts it within a second.\n' : '') : 'Note: API keys are off; set DMS_API_KEY_ENABLED=true (or auth.api_key_enabled) for the node to require them.\n'),
      );
    });

  apikey
    .command('list')
    .description('list API keys: id, name, role, creation time (never the keys)')
    .option('--wide', 'print whole ids (default: their first 8 characters)')
    .action((opts: { wide?: boolean }, cmd: Command) => {
      const keys = readApiKeys(apiKeysPath(homeOf(cmd))).map(({ sha256: _hash, ...k }) => k);
      const id = (x: string) => (opts.wide ? x : shortId(x));
      output(cmd, keys, keys.length ? keys.map((k) => `${id(k.id)}  ${k.role.padEnd(8)}  ${k.created_at}  ${k.name}`).join('\n') : 'no API keys');
    });

  apikey
    .command('revoke')
    .description('revoke an API key by its id')
    .argument('<id>', 'the key id shown by `create` and `list`, or any unique prefix of it')
    .action((given: string, _opts, cmd: Command) => {
      const path = apiKeysPath(homeOf(cmd));
      const id = pickByPrefix('API key', given, readApiKeys(path).map((k) => k.id));
      if (!revokeApiKey(path, id)) throw new CliError(`no API key with id ${id}`);
      output(cmd, { revoked: id }, `API key ${id} revoked`);
    });

  auth
    .command('token')
    .description('sign a bearer JWT (HS256) with this home\'s auth.jwt_secret / DMS_JWT_SECRET; prints it')
    .requiredOption('--role <role>', `one of ${ROLES.join(', ')}`)
    .option('--subject <sub>', 'who the token is for (its sub claim)', 'dms-cli')
    .option('--expiry <duration>', 'lifetime, e.g. 15m, 1h, 7d', '1h')
    .action(async (opts: { role: string; subject: string; expiry: string }, cmd: Command) => {
      if (!isRole(opts.role)) throw new CliError(`--role: '${opts.role}' is not one of ${ROLES.join(', ')}`);
      if (!/^\d+[smhd]$/.test(opts.expiry)) throw new CliError(`--expiry: '${opts.expiry}' is not a duration like 15m, 1h or 7d`);
      const auth = loadConfig({ home: homeOf(cmd), file: globals(cmd).config }).auth;
      if (!auth.jwt_secret) throw new CliError('no JWT secret: set DMS_JWT_SECRET (or auth.jwt_secret) as the node has it');
      // The node refuses a longer-lived token; better to say so here than hand out one that never works.
      const lifetimeS = Number(opts.expiry.slice(0, -1)) * { s: 1, m: 60, h: 3600, d: 86_400 }[opts.expiry.slice(-1) as 's' | 'm' | 'h' | 'd'];
      if (lifetimeS > auth.jwt_max_lifetime_s) {
        throw new CliError(`--expiry: ${opts.expiry} is longer than the ${auth.jwt_max_lifetime_s} s auth.jwt_max_lifetime_s allows`);
      }
      // Loaded here: every other command starts without jose.
      const { SignJWT } = await import('jose');
      const token = new SignJWT({ role: opts.role }).setProtectedHeader({ alg: 'HS256' }).setSubject(opts.subject).setIssuedAt().setExpirationTime(opts.expiry);
      if (auth.jwt_issuer) token.setIssuer(auth.jwt_issuer);
      if (auth.jwt_audience) token.setAudience(auth.jwt_audience);
      const jwt = await token.sign(new TextEncoder().encode(auth.jwt_secret));
      output(cmd, { token: jwt, role: opts.role, subject: opts.subject }, jwt);
    });
}

/**
 * REST credentials for the CLI's own requests: `DMS_API_KEY` goes as X-API-Key, `DMS_TOKEN` as a
 * bearer token. Nothing when neither is set (auth off, the default on loopback).
 */
export function restCredentials(env: NodeJS.ProcessEnv = process.env): Record<string, string> {
  const headers: Record<string, string> = {};
  if (env.DMS_API_KEY) headers['x-api-key'] = env.DMS_API_KEY;
  if (env.DMS_TOKEN) headers.authorization = `Bearer ${env.DMS_TOKEN}`;
  return headers;
}
