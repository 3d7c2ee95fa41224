import { Command } from 'commander';
import { registerActorCommands } from './commands/actor.js';
import { registerAuthCommands } from './commands/auth.js';
import { registerCapCommands } from './commands/cap.js';
import { registerKeyCommands } from './commands/key.js';
import { registerConfigCommands } from './commands/config.js';
import { registerDevCommands } from './commands/dev.js';
import { registerNodeCommands } from './commands/lifecycle.js';
import { registerJobCommands } from './commands/jobs.js';
import { registerEnsembleCommands } from './commands/ensemble.js';
import { registerResourceCommands } from './commands/resources.js';
import { registerOnboardCommands } from './commands/onboard.js';
import { registerPeersCommands } from './commands/peers.js';
import { registerRunCommand } from './commands/run.js';
import { registerFileCommands } from './commands/files.js';
import { OVERVIEW } from './overview.js';
import { routeUsageErrors } from './usage.js';
import { packageVersion } from '../runtime/version.js';

/**
 * The whole `dms` command tree, built fresh: main.ts parses the process's arguments with it, and
 * a test can render any command's help from it without spawning the CLI.
 */
export function buildProgram(): Command {
  const program = new Command('dms')
    .description('DMS: the device management service node of a decentralized compute network')
    .version(packageVersion(), '-V, --version', 'print the version of dms')
    .option('--home <dir>', 'node home directory (default $DMS_HOME or ~/.dms)')
    .option('--config <file>', 'configuration file (default <home>/dms_config.json, else ./dms_config.json)')
    .option('--json', 'print data as JSON, and errors as {"error": …} on stderr');

  registerNodeCommands(program);
  registerRunCommand(program);
  registerOnboardCommands(program);
  registerConfigCommands(program);
  registerActorCommands(program);
  registerCapCommands(program);
  registerKeyCommands(program);
  registerAuthCommands(program);
  registerJobCommands(program);
  registerEnsembleCommands(program);
  registerFileCommands(program);
  registerResourceCommands(program);
  registerPeersCommands(program);
  registerDevCommands(program);

  // `dms` alone: an overview rather than the whole help. Set after the subcommands are made, so
  // they do not inherit the excess arguments this needs to see a word that is no command.
  program.allowExcessArguments().action((_opts, cmd: Command) => {
    const [word] = cmd.args;
    if (word !== undefined) cmd.error(`unknown command '${word}'`, { code: 'commander.unknownCommand' });
    process.stdout.write(OVERVIEW);
  });
  routeUsageErrors(program);
  return program;
}
