import { existsSync, readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import type { Command } from 'commander';
import { KeyPair } from '../../runtime/crypto/keys.js';
import { homePaths, isSealedKey, writeKey } from '../../runtime/home.js';
import { CliError, homeOf, output } from '../context.js';
import { newKeyPassphrase } from '../passphrase.js';
import { keyPath } from './cap.js';

/** `dms key …`: identities other than the home's node and operator keys (a second user, a service). */
export function registerKeyCommands(program: Command): void {
  const key = program.command('key').description('Ed25519 keys: make one, or print the DID of one');

  key
    .command('new')
    .description('make a key under <home>/keys/<name>.json (or --out FILE), encrypted with DMS_PASSPHRASE or a passphrase asked at the terminal, else stored 0600; prints its DID')
    .argument('[name]', 'name of the key in the home (letters, digits, . _ -)')
    .option('--out <file>', 'write the key to this file instead')
    .action(async (name: string | undefined, opts: { out?: string }, cmd: Command) => {
      if (!name === !opts.out) throw new CliError('give a key name or --out FILE (one of them)');
      if (name && !/^[A-Za-z0-9_.-]{1,64}$/.test(name)) throw new CliError(`'${name}' is not a key name (letters, digits, . _ -)`);
      if (name === 'node' || name === 'operator') throw new CliError(`'${name}' is the home's own key; \`dms init\` makes it`);
      const path = opts.out ? resolve(opts.out) : join(homePaths(homeOf(cmd)).keys, `${name}.json`);
      if (existsSync(path)) throw new CliError(`${path} already exists; refusing to overwrite a key`);
      const passphrase = await newKeyPassphrase();
      const k = KeyPair.generate();
      writeKey(path, k, passphrase);
      const how = passphrase ? 'encrypted with the passphrase' : 'stored unencrypted, readable only by you: mode 0600';
      output(cmd, { did: k.did, path, encrypted: Boolean(passphrase) }, `${k.did}\nkey ${path} (${how})`);
    });

  key
    .command('did')
    .description('print the DID of a key (default: the operator); needs no passphrase')
    .argument('[name-or-file]', 'operator, node, a name made by `dms key new`, or a key file')
    .action((which: string | undefined, _opts, cmd: Command) => {
      const path = keyPath(homeOf(cmd), which);
      if (!existsSync(path)) throw new CliError(`no key at ${path}; run \`dms init\` to create the home's keys`);
      // The DID is stored beside the (possibly sealed) seed, so it is readable without unlocking.
      let did: unknown;
      try {
        did = JSON.parse(readFileSync(path, 'utf8')).did;
      } catch {
        did = undefined;
      }
      if (typeof did !== 'string' || !did.startsWith('did:key:z')) throw new CliError(`${path}: not a valid DMS key file`);
      output(cmd, { did, path, encrypted: isSealedKey(path) }, did);
    });
}
