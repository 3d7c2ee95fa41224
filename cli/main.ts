#!/usr/bin/env node
/** The `dms` command from its sources (`npx tsx cli/main.ts`); the build's is cli/bin.ts. */
import { runCli } from './run.js';

await runCli(process.argv);
