import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { afterEach, beforeEach, expect, it } from 'vitest';
import { openStorage } from '../../storage/index.js';

let dir: string;
beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'dms-crash-'));
});
afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

it('a job the caller got back survives kill -9 of the process that wrote it', async () => {
  const path = join(dir, 'dms.db');
  const child = spawn(process.execPath, ['--import', 'tsx', fileURLToPath(new URL('./fixtures/write-then-hang.ts', import.meta.url)), path], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  try {
    const lines = createInterface({ input: child.stdout });
    const [id] = (await once(lines, 'line')) as [string];
    child.kill('SIGKILL');
    await once(child, 'exit');

    const storage = await openStorage(path);
    try {
      expect(await storage.jobs.get(id)).toMatchObject({ name: 'survivor', status: 'running', container_id: 'c-1' });
      expect((await storage.events.listFor(id)).map((e) => e.to_status)).toEqual(['pending', 'running']);
    } finally {
      await storage.close();
    }
  } finally {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  }
});
