/**
 * The node of a command's home as a REST client (client/rest.ts), for the commands that use its
 * plain routes (jobs, resources, allocations). Its failures are ClientErrors, worded for a
 * person in one place, `nodeFailure` (./context.ts), like those of `dms actor`.
 */
import type { Command } from 'commander';
import { RestClient } from '../client/rest.js';
import { restCredentials } from './commands/auth.js';
import { nodeUrl } from './context.js';
import { patientFetch } from './patient-fetch.js';

/** The node of the command's home, with the credentials `dms actor` sends too (DMS_API_KEY, DMS_TOKEN). */
export const restFor = (cmd: Command): RestClient => new RestClient({ url: nodeUrl(cmd), headers: restCredentials(), fetch: patientFetch });
