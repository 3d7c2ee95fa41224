#!/usr/bin/env node
import '../runtime/polyfills.js';
import { Command } from 'commander';
import { ClientError } from '../client/errors.js';
import { registerActorCommands } from './commands/actor.js';
import { registerAuthCommands } from './commands/auth.js';
import { registerCapCommands } from './commands/cap.js';
import { registerKeyCommands } from './commands/key.js';
import { registerConfigCommands } from './commands/config.js';
import { registerDevCommands } from './commands/dev.js';
import { registerNodeCommands } from './commands/lifecycle.js';
import { registerJobCommands } from './commands/jobs.js';
import { registerResourceCommands } from './commands/resources.js';
import { registerPeersCommands } from './commands/peers.js';
import { registerRunCommand } from './commands/run.js';
import { homeOf, nodeFailure } from './context.js';
import { OVERVIEW } from './overview.js';
import { fail, routeUsageErrors } from './usage.js';
import { packageVersion } from './version.js';

const program = new Command('dms')
  .description('DMS: the device management service node of a decentralized compute network')
  .version(packageVersion(), '-V, --version', 'print the version of dms')
  .option('--home <dir>', 'node home directory (default $DMS_HOME or ~/.dms)')
  .option('--config <file>', 'configuration file (default <home>/dms_config.json, else ./dms_config.json)')
  .option('--json', 'print data as JSON, and errors as {"error": …} on stderr');

registerNodeCommands(program);
registerRunCommand(program);
registerConfigCommands(program);
registerActorCommands(program);
registerCapCommands(program);
registerKeyCommands(program);
registerAuthCommands(program);
registerJobCommands(program);
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

try {
  await program.parseAsync(process.argv);
} catch (e) {
  // A node failure no command worded itself (the REST commands leave them to here).
  fail(e instanceof ClientError ? nodeFailure(e, homeOf(program)) : e, Boolean(program.opts().json));
}
