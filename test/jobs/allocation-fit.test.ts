// A job running on an allocation made for it may not take more than that allocation holds
// (actors/resources/manager.ts, the `own && fitsWithin(...)` branch), in cores and in GPUs.
// Against a real node process that sees two GPUs (a stand-in nvidia-smi on its PATH): the
// attacker makes a small allocation for its job and asks for more; the job stays pending
// until the share itself can give the excess.
import { chmodSync, mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Job, JobSpecInput } from '../../behaviors/jobs/schema.js';
import { type NodeProcess, removeHome, tempHome } from '../helpers/node.js';
import { GiB, MiB, nullJob, Rest, startJobNode, until } from './helpers.js';

let node: NodeProcess;
let rest: Rest;
let bin: string;

const SHARE = { cpu: { cores: 1 }, memory: { size: 512 * MiB }, gpu: { count: 2 } };
/** The same share with more memory: a change that wakes the scheduler and frees no cpu or GPU. */
const SHARE_MORE_MEMORY = { ...SHARE, memory: { size: GiB } };

beforeAll(async () => {
  bin = tempHome('dms-fake-smi-');
  mkdirSync(bin, { recursive: true });
  const smi = join(bin, 'nvidia-smi');
  writeFileSync(smi, '#!/bin/sh\nprintf "NVIDIA A100, 40960\\nNVIDIA A100, 40960\\n"\n');
  chmodSync(smi, 0o755);
  node = await startJobNode({ env: { PATH: `${bin}:${process.env.PATH}` } });
  rest = new Rest(node.url);
  const device = await rest.get('/api/v1/device/status');
  expect(JSON.stringify(device.body), 'the node sees the stand-in GPUs').toContain('NVIDIA A100');
}, 60_000);
afterAll(async () => {
  await node?.stop();
  if (node) removeHome(node.home);
  if (bin) removeHome(bin);
});

/** Waits for the job's pending reason to read `reason`; fails at once if the job leaves pending. */
async function pendingReason(id: string, reason: string): Promise<void> {
  const job = await until(`job ${id} pending with "${reason}"`, async () => {
    const j: Job = await rest.job(id);
    return j.status !== 'pending' || j.pending_reason === reason ? j : undefined;
  });
  expect(job).toMatchObject({ status: 'pending', pending_reason: reason });
}

async function allocate(resources: unknown, job_id?: string): Promise<string> {
  const r = await rest.post('/api/v1/allocations', { resources, ...(job_id ? { job_id } : {}) });
  expect(r.status, JSON.stringify(r.body)).toBe(201);
  return r.body.id;
}

async function healthy(): Promise<void> {
  expect((await fetch(`${node.url}/health`)).status).toBe(200);
}

describe('a job on its own allocation', () => {
  it('asking for more cores than the allocation holds waits for the share, and then takes the excess from it', async () => {
    await rest.put('/api/v1/device/config', { onboarded: SHARE });
    try {
      const hog = await allocate({ cpu: { cores: 0.75 }, memory: { size: 0 } });
      const job = await rest.submit(nullJob({ name: 'greedy', cores: 0.5, memory: 16 * MiB, durationMs: 60_000 }));
      await pendingReason(job.id, 'waiting for resources: not enough cpu: 0.5 cores asked, 0.25 cores free of 1 core onboarded');
      // The attacker's allocation for its job: a quarter core, half of what the job asks.
      await allocate({ cpu: { cores: 0.25 }, memory: { size: 16 * MiB } }, job.id);
      await rest.put('/api/v1/device/config', { onboarded: SHARE_MORE_MEMORY });
      // Tried again after the wake-up, and refused: the allocation does not cover it and the share has nothing left.
      await pendingReason(job.id, 'waiting for resources: not enough cpu: 0.5 cores asked, 0 cores free of 1 core onboarded');
      await healthy();

      // Once the share has room, the job runs, holding its allocation and the full ask besides.
      await rest.delete(`/api/v1/allocations/${hog}`);
      await rest.waitFor(job.id, ['running']);
      expect((await rest.get('/api/v1/resources/usage')).body.allocated.cpu.cores).toBeCloseTo(0.75);
      await rest.delete(`/api/v1/jobs/${job.id}`);
    } finally {
      await rest.put('/api/v1/device/config', { onboarded: null });
    }
  });

  it('asking for more GPUs than the allocation holds waits for the share', async () => {
    await rest.put('/api/v1/device/config', { onboarded: SHARE });
    try {
      const hog = await allocate({ cpu: { cores: 0 }, memory: { size: 0 }, gpu: { count: 1 } });
      const base = nullJob({ name: 'gpu-greedy', cores: 0.1, memory: 16 * MiB, durationMs: 60_000 });
      const spec: JobSpecInput = { ...base, resources: { ...base.resources, gpu: { count: 2 } } };
      const job = await rest.submit(spec);
      await pendingReason(job.id, 'waiting for resources: not enough gpu: 2 GPUs asked, 1 free of 2 onboarded');
      // One GPU for the job, which asks for two; cores and memory are covered.
      const own = await allocate({ cpu: { cores: 0.1 }, memory: { size: 16 * MiB }, gpu: { count: 1 } }, job.id);
      await rest.put('/api/v1/device/config', { onboarded: SHARE_MORE_MEMORY });
      await pendingReason(job.id, 'waiting for resources: not enough gpu: 2 GPUs asked, 0 free of 2 onboarded');
      await healthy();

      // With both allocations gone the share gives it both GPUs.
      await rest.delete(`/api/v1/allocations/${hog}`);
      await rest.delete(`/api/v1/allocations/${own}`);
      await rest.waitFor(job.id, ['running']);
      expect((await rest.get('/api/v1/resources/usage')).body.allocated.gpu?.count).toBe(2);
      await rest.delete(`/api/v1/jobs/${job.id}`);
    } finally {
      await rest.put('/api/v1/device/config', { onboarded: null });
    }
  });
});
