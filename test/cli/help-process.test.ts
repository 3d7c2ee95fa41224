import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { assertBuilt, cleanupHomes, dms, tempHome } from './helpers.js';

// The built CLI, spawned: --help exits 0 with usage on stdout at the top, one level and two
// levels down. Every other command's help is checked in process by help.test.ts.
beforeAll(assertBuilt);
afterAll(cleanupHomes);

describe.concurrent('--help, as a process', () => {
  for (const cmd of [[], ['jobs'], ['auth', 'apikey', 'create']]) {
    it(`dms ${[...cmd, '--help'].join(' ')} exits 0 with usage`, async () => {
      const r = await dms(tempHome('help'), [...cmd, '--help']);
      expect(r.code, r.stderr).toBe(0);
      expect(r.stdout).toContain(`Usage: dms${cmd.length ? ` ${cmd.join(' ')}` : ''}`);
    });
  }
});
