import { CommanderError } from 'commander';
import { describe, expect, it } from 'vitest';
import { buildProgram } from '../../cli/program.js';

// Every command's --help, rendered in process from the same command tree the CLI parses with
// (cli/program.ts): commander ends `--help` with a CommanderError whose exit code main.ts exits
// with. help-process.test.ts spawns the built CLI for a few, for the real exit code and stdout.
export const COMMANDS = [
  [],
  ['init'],
  ['start'],
  ['stop'],
  ['status'],
  ['config'],
  ['config', 'get'],
  ['config', 'set'],
  ['config', 'list'],
  ['actor'],
  ['actor', 'handle'],
  ['actor', 'send'],
  ['actor', 'invoke'],
  ['actor', 'broadcast'],
  ['cap'],
  ['cap', 'new'],
  ['cap', 'grant'],
  ['cap', 'delegate'],
  ['cap', 'anchor'],
  ['cap', 'list'],
  ['cap', 'revoke'],
  ['key'],
  ['key', 'new'],
  ['key', 'did'],
  ['auth'],
  ['auth', 'apikey', 'create'],
  ['auth', 'apikey', 'list'],
  ['auth', 'apikey', 'revoke'],
  ['auth', 'token'],
  ['peers'],
  ['peers', 'list'],
  ['peers', 'self'],
  ['peers', 'ping'],
  ['dev'],
  ['dev', 'watch'],
  ['peers', 'connect'],
  ['jobs'],
  ['jobs', 'list'],
  ['jobs', 'submit'],
  ['jobs', 'status'],
  ['jobs', 'describe'],
  ['jobs', 'logs'],
  ['jobs', 'cancel'],
  ['jobs', 'get'],
  ['ensemble'],
  ['ensemble', 'deploy'],
  ['ensemble', 'list'],
  ['ensemble', 'status'],
  ['ensemble', 'describe'],
  ['ensemble', 'logs'],
  ['ensemble', 'cancel'],
  ['ensemble', 'port-forward'],
  ['put'],
  ['pin'],
  ['unpin'],
  ['volume', 'create'],
  ['volume', 'list'],
  ['volume', 'rm'],
  ['volume', 'snapshot'],
  ['run'],
  ['onboard'],
  ['offboard'],
  ['resources'],
  ['resources', 'show'],
  ['allocations'],
  ['allocations', 'list'],
  ['allocations', 'create'],
  ['allocations', 'release'],
];

/** What `dms <args>` writes to stdout and the exit code main.ts would end with, run in this process. */
async function helpOf(args: string[]): Promise<{ code: number; stdout: string }> {
  const program = buildProgram();
  let stdout = '';
  const capture = (cmd: typeof program) => {
    cmd.configureOutput({ writeOut: (s) => void (stdout += s) });
    cmd.commands.forEach(capture);
  };
  capture(program);
  try {
    await program.parseAsync(['node', 'dms', ...args]);
  } catch (e) {
    // main.ts: fail() exits with a CommanderError's own exit code.
    if (e instanceof CommanderError) return { code: e.exitCode, stdout };
    throw e;
  }
  return { code: 0, stdout };
}

describe('--help', () => {
  for (const cmd of COMMANDS) {
    it(`dms ${[...cmd, '--help'].join(' ')} exits 0 with usage`, async () => {
      const r = await helpOf([...cmd, '--help']);
      expect(r.code).toBe(0);
      expect(r.stdout).toContain(`Usage: dms${cmd.length ? ` ${cmd.join(' ')}` : ''}`);
    });
  }
});
