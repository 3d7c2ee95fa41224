import { passphraseFromEnv } from '../runtime/crypto/sealed.js';
import { isSealedKey } from '../runtime/home.js';
import { CliError } from './context.js';

/**
 * Passphrases for sealed keys: `DMS_PASSPHRASE`, else a prompt when a person is at a terminal.
 * Without either, commands fail at once naming the variable: scripts, CI and services never
 * hang on a prompt nobody can answer.
 */

/** Whether a person can be asked: both the input and the prompt's output are terminals. */
export const canPrompt = (): boolean => Boolean(process.stdin.isTTY && process.stderr.isTTY);

/** Reads a line from the terminal without echoing it. */
export function readHidden(question: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const stdin = process.stdin;
    process.stderr.write(question);
    stdin.setRawMode(true);
    stdin.resume();
    stdin.setEncoding('utf8');
    let value = '';
    const finish = () => {
      stdin.off('data', onData);
      stdin.setRawMode(false);
      stdin.pause();
      process.stderr.write('\n');
    };
    const onData = (chunk: string) => {
      for (const ch of chunk) {
        if (ch === '\r' || ch === '\n' || ch === '\u0004') {
          finish();
          resolve(value);
          return;
        }
        if (ch === '\u0003') {
          finish();
          reject(new CliError('cancelled', 130));
          return;
        }
        if (ch === '\u007f' || ch === '\b') value = value.slice(0, -1);
        else value += ch;
      }
    };
    stdin.on('data', onData);
  });
}

/**
 * The passphrase for new keys: `DMS_PASSPHRASE`, else asked twice at a terminal (empty keeps
 * the keys unencrypted), else none.
 */
export async function newKeyPassphrase(): Promise<string | undefined> {
  const env = passphraseFromEnv();
  if (env || !canPrompt()) return env;
  const first = await readHidden('Passphrase to encrypt the keys (empty: store them unencrypted, mode 0600): ');
  if (!first) return undefined;
  if ((await readHidden('Same passphrase again: ')) !== first) throw new CliError('the passphrases differ; nothing was written');
  return first;
}

/**
 * Makes the passphrase of sealed keys available to `readKey` (through `DMS_PASSPHRASE` in this
 * process, which a detached node inherits). Asks at a terminal; fails at once without one.
 */
export async function unlockKeys(paths: string[]): Promise<void> {
  const sealed = paths.filter((p) => isSealedKey(p));
  if (sealed.length === 0 || passphraseFromEnv()) return;
  if (!canPrompt()) throw new CliError(`${sealed[0]} is encrypted: set DMS_PASSPHRASE (no terminal to ask on)`);
  const pass = await readHidden(`Passphrase for ${sealed.length === 1 ? sealed[0] : 'the keys'}: `);
  if (!pass) throw new CliError('no passphrase given');
  process.env.DMS_PASSPHRASE = pass;
}
