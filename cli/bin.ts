#!/usr/bin/env node
/**
 * The `dms` command as built (dist/cli/main.js): the program is one script, dist/lib/dms.cjs
 * (cli/dms.ts), run through V8's code cache (runtime/code-cache.ts). This file is all the
 * JavaScript Node loads as a module.
 */
import { fileURLToPath } from 'node:url';
import { loadBundle, saveCodeCache } from '../runtime/code-cache.js';

const program = loadBundle(fileURLToPath(new URL('../lib/dms.cjs', import.meta.url))) as typeof import('./dms.js');
process.once('exit', () => saveCodeCache('command'));
await program.runCli(process.argv);
