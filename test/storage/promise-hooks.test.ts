import { executionAsyncId } from 'node:async_hooks';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { EnsembleSpec } from '../../behaviors/ensembles/schema.js';
import type { JobSpecInput } from '../../behaviors/jobs/schema.js';
import { openStorage, type Storage } from '../../storage/index.js';

/**
 * Whether V8's promise hooks are on in this process: with them a promise's reaction runs under
 * an async id of its own; without, under none (0). Node 20 turns them on for good at the first
 * AsyncLocalStorage.run, which MikroORM's flush and `transactional` make (storage/connection.ts).
 */
const promiseHooksOn = (): Promise<boolean> => Promise.resolve().then(() => executionAsyncId() !== 0);

const spec: JobSpecInput = { name: 'j', image: 'none', executor: 'null', resources: { cpu: { cores: 0.1 }, memory: { size: 1024 } } };

let dir: string;
let storage: Storage;
beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'dms-hooks-'));
  storage = await openStorage(join(dir, 'dms.sqlite'));
});
afterEach(async () => {
  await storage.close();
  await rm(dir, { recursive: true, force: true });
});

describe("the node's writes leave promise hooks off", () => {
  it('stores and reads jobs, device settings, allocations, ensembles and waiting cancels without turning them on', async () => {
    expect(await promiseHooksOn(), 'promise hooks were on before any write: something else in this process turned them on').toBe(false);

    const job = await storage.jobs.create(spec);
    await storage.jobs.update(job.id, { status: 'running', reason: 'started' });
    await storage.device.put({ name: 'edge-1', onboarded: { cpu: { cores: 1 }, memory: { size: 1024 ** 3 }, storage: { size: 10 ** 9 } } });
    await storage.device.put({ labels: { zone: 'lab' } });
    const held = await storage.allocations.create({ resources: { cpu: { cores: 1 }, memory: { size: 1024 } }, job_id: job.id });
    const other = await storage.allocations.create({ resources: { cpu: { cores: 1 }, memory: { size: 1024 } } });
    await storage.allocations.release(other.id);
    await storage.allocations.releaseForJob(job.id);
    const ensemble = '5d0a1f7e-3b0e-4c55-9a43-1f4f2f6b2c10';
    await storage.ensembles.create(ensemble, { name: 'pair', parts: {} } as unknown as EnsembleSpec);
    await storage.ensembles.update(ensemble, { status: 'running', attempts: 1, restarts: { server: 1 } });
    await storage.cancels.put({ job_id: job.id, node: 'provider', reason: 'cancelled', since: Date.now() }, 10);
    await storage.cancels.put({ job_id: ensemble, node: 'provider', reason: 'cancelled', since: Date.now() }, 10);
    await storage.cancels.remove(ensemble);
    // The reads, through the ORM, as the routes make them.
    await storage.jobs.list({ status: 'running' });
    await storage.jobs.count();
    await storage.allocations.list({ active: false });
    await storage.ensembles.list({ limit: 10, offset: 0 });
    await storage.cancels.list();

    expect(await promiseHooksOn(), 'a write turned promise hooks on').toBe(false);
    // And each wrote what it said.
    expect(await storage.device.get()).toEqual({ name: 'edge-1', location: {}, labels: { zone: 'lab' }, onboarded: { cpu: { cores: 1 }, memory: { size: 1024 ** 3 }, storage: { size: 10 ** 9 } } });
    expect((await storage.allocations.get(held.id))?.released_at).not.toBeNull();
    expect(await storage.ensembles.get(ensemble)).toMatchObject({ status: 'running', attempts: 1, restarts: { server: 1 }, reason: null });
    expect((await storage.cancels.list()).map((c) => c.job_id)).toEqual([job.id]);
  });
});
