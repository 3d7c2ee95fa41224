import { chmod, mkdtemp, rm, writeFile } from 'node:fs/promises';
import os, { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ResourceSpecSchema } from '../../behaviors/jobs/schema.js';
import { detectGpus, diskSpace, measureCapacity } from '../../actors/resources/capacity.js';

let dir: string;
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'dms-capacity-'));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

/** An executable standing in for nvidia-smi, printing `output` and exiting with `code`. */
async function fakeSmi(name: string, output: string, code = 0): Promise<string> {
  const path = join(dir, name);
  await writeFile(path, `#!/bin/sh\nprintf '%s' '${output}'\nexit ${code}\n`);
  await chmod(path, 0o755);
  return path;
}

describe('capacity', () => {
  it('measures cores, memory and the data directory’s free space in the ResourceSpec shape', async () => {
    const capacity = await measureCapacity({ dataDir: join(dir, 'not-created-yet'), nvidiaSmi: join(dir, 'absent') });
    expect(ResourceSpecSchema.parse(capacity)).toEqual(capacity);
    expect(capacity.cpu.cores).toBe(os.availableParallelism());
    expect(capacity.memory.size).toBe(os.totalmem());
    const disk = await diskSpace(dir);
    expect(capacity.storage.size).toBeGreaterThan(0);
    expect(capacity.storage.size).toBeLessThanOrEqual(disk.total);
    expect(disk.free).toBeLessThanOrEqual(disk.total);
    expect(capacity.gpu).toBeUndefined();
  });

  it('reads GPUs from nvidia-smi: count, model and the smallest card’s memory', async () => {
    const smi = await fakeSmi('smi-two', 'NVIDIA A100-SXM4-40GB, 40960\nNVIDIA A100-SXM4-80GB, 81920\n');
    expect(await detectGpus(smi)).toEqual({
      count: 2,
      model: 'NVIDIA A100-SXM4-40GB, NVIDIA A100-SXM4-80GB',
      vram: 40960 * 1024 * 1024,
    });
    const capacity = await measureCapacity({ dataDir: dir, nvidiaSmi: smi });
    expect(capacity.gpu?.count).toBe(2);
  });

  it('offers no GPU when nvidia-smi is missing, fails or lists nothing', async () => {
    expect(await detectGpus(join(dir, 'absent'))).toBeUndefined();
    expect(await detectGpus(await fakeSmi('smi-broken', 'NVIDIA-SMI has failed because it could not communicate with the driver', 9))).toBeUndefined();
    expect(await detectGpus(await fakeSmi('smi-empty', ''))).toBeUndefined();
  });
});
