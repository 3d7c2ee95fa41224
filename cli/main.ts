#!/usr/bin/env node
import '../runtime/polyfills.js';
import { Command, CommanderError } from 'commander';
import { registerActorCommands } from './commands/actor.js';
import { registerAuthCommands } from './commands/auth.js';
import { registerCapCommands } from './commands/cap.js';
import { registerKeyCommands } from './commands/key.js';
import { registerConfigCommands } from './commands/config.js';
import { registerNodeCommands } from './commands/node.js';
import { registerJobCommands } from './commands/jobs.js';
import { registerResourceCommands } from './commands/resources.js';
import { registerPeersCommands } from './commands/peers.js';
import { describeError } from './context.js';

const program = new Command('dms')
  .description('DMS: the device management service node of a decentralized compute network')
  .option('--home <dir>', 'node home directory (default $DMS_HOME or ~/.dms)')
  .option('--config <file>', 'configuration file (default <home>/dms_config.json, else ./dms_config.json)')
  .option('--json', 'print data as JSON')
  .showHelpAfterError()
  .exitOverride();

registerNodeCommands(program);
registerConfigCommands(program);
registerActorCommands(program);
registerCapCommands(program);
registerKeyCommands(program);
registerAuthCommands(program);
registerJobCommands(program);
registerResourceCommands(program);
registerPeersCommands(program);

try {
  await program.parseAsync(process.argv);
} catch (e) {
  if (e instanceof CommanderError) process.exit(e.exitCode);
  process.stderr.write(`dms: ${describeError(e)}\n`);
  process.exit(1);
}
