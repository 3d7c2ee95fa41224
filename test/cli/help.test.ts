import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { assertBuilt, cleanupHomes, dms, tempHome } from './helpers.js';

beforeAll(assertBuilt);
afterAll(cleanupHomes);

const COMMANDS = [
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
  ['run'],
  ['resources'],
  ['resources', 'show'],
  ['allocations'],
  ['allocations', 'list'],
  ['allocations', 'create'],
  ['allocations', 'release'],
];

describe.concurrent('--help', { timeout: 90_000 }, () => {
  for (const cmd of COMMANDS) {
    it(`dms ${[...cmd, '--help'].join(' ')} exits 0 with usage`, async () => {
      const r = await dms(tempHome('help'), [...cmd, '--help']);
      expect(r.code, r.stderr).toBe(0);
      expect(r.stdout).toContain(`Usage: dms${cmd.length ? ` ${cmd.join(' ')}` : ''}`);
    });
  }
});
