// Every job path through a real node (in this process), with the null executor: no Docker needed.
import { statSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Job } from '../../behaviors/jobs/schema.js';
import type { LocalNode } from '../helpers/local-node.js';
import { GiB, type JobNodeScene, jobNodeScene, MiB, nullJob, type Rest, startLocalJobNode, textOf, until } from './helpers.js';

let scene: JobNodeScene<LocalNode> | undefined;
let node: LocalNode;
let rest: Rest;

beforeAll(async () => void ({ node, rest } = scene = await jobNodeScene(startLocalJobNode)));
afterAll(() => scene?.stop());

const usage = async () => (await rest.get('/api/v1/resources/usage')).body;

describe('job lifecycle', () => {
  it('runs a job that prints and exits 0 to completed, with its output in its logs and in the followed stream', async () => {
    const submitted = await rest.submit(nullJob({ name: 'hello', stdout: 'hello\nworld', stderr: 'careful', durationMs: 300 }));
    expect(submitted).toMatchObject({ name: 'hello', status: 'pending', executor: 'null', exit_code: null, error: null });
    expect(submitted.id).toMatch(/^[0-9a-f-]{36}$/);

    // Followed from submission (from=0: from the first byte): progress, then every chunk, then the end.
    const events = await rest.events(`/api/v1/jobs/${submitted.id}/logs?follow=true&from=0`);
    const statuses = events.filter((e) => e.event === 'status').map((e) => e.data.status);
    const order = ['pending', 'running', 'completed'];
    expect(statuses.at(-1)).toBe('completed');
    expect(statuses.map((s) => order.indexOf(s))).toEqual([...new Set(statuses.map((s) => order.indexOf(s)))].sort());
    const logs = events.filter((e) => e.event === 'log').map((e) => e.data);
    expect(textOf(logs)).toBe('hello\nworld\n');
    expect(textOf(logs, 'stderr')).toBe('careful\n');
    expect(events.at(-1)).toEqual({ event: 'end', data: { id: submitted.id, status: 'completed', exit_code: 0, error: null } });

    const job = await rest.job(submitted.id);
    expect(job).toMatchObject({ status: 'completed', exit_code: 0, error: null, node: node.peerId, pending_reason: null });
    expect(Date.parse(job.updated_at)).toBeGreaterThan(Date.parse(job.created_at));

    const { status, body } = await rest.get(`/api/v1/jobs/${submitted.id}/logs`);
    expect(status).toBe(200);
    // `next` is a byte offset: all of the stored log, three chunks of it.
    const stored = statSync(join(node.home, 'data', 'job-logs', `${submitted.id}.log`)).size;
    expect(body).toMatchObject({ id: submitted.id, status: 'completed', done: true, more: false, next: stored });
    expect(body.chunks).toHaveLength(3);
    expect(textOf(body.chunks)).toBe('hello\nworld\n');
    // Following a job that already ended from the start (the default) replays its output and
    // ends at once; from its end it only ends.
    const replay = await rest.events(`/api/v1/jobs/${submitted.id}/logs?follow=true`);
    expect(replay.map((e) => e.event)).toEqual(['status', 'log', 'log', 'log', 'end']);
    const tail = await rest.events(`/api/v1/jobs/${submitted.id}/logs?follow=true&from=end`);
    expect(tail.map((e) => e.event)).toEqual(['status', 'end']);
    // A page starting after the first chunk holds the other two.
    const first = await rest.get(`/api/v1/jobs/${submitted.id}/logs?limit=1`);
    expect(first.body).toMatchObject({ more: true, done: false });
    expect(first.body.chunks).toHaveLength(1);
    const rest2 = await rest.get(`/api/v1/jobs/${submitted.id}/logs?from=${first.body.next}`);
    expect(rest2.body).toMatchObject({ next: stored, more: false, done: true });
    expect(rest2.body.chunks).toHaveLength(2);
  });

  it('fails a job that exits 3 with exit code 3, one over its memory limit as OOM, and one that cannot start with the reason', async () => {
    const [exit3, oom, unstartable] = await Promise.all([
      rest.submit(nullJob({ exitCode: 3 })),
      rest.submit(nullJob({ oom: true })),
      rest.submit(nullJob({ startError: 'image nope:latest is not present and could not be pulled' })),
    ]);
    expect(await rest.waitFor(exit3.id)).toMatchObject({ status: 'failed', exit_code: 3, error: 'exited with code 3' });
    expect(await rest.waitFor(oom.id)).toMatchObject({ status: 'failed', exit_code: 137, error: 'killed: out of memory' });
    expect(await rest.waitFor(unstartable.id)).toMatchObject({
      status: 'failed',
      exit_code: null,
      error: 'image nope:latest is not present and could not be pulled',
    });
  });

  it('stops a job at its timeout and fails it naming the timeout', async () => {
    const job = await rest.submit(nullJob({ durationMs: 60_000, timeout_s: 1 }));
    expect(await rest.waitFor(job.id)).toMatchObject({ status: 'failed', error: 'timed out after 1 s' });
  });

  it('cancels pending and running jobs: 200 with the failed job, its resources freed, a second cancel 409', async () => {
    const before = await usage();
    const running = await rest.submit(nullJob({ durationMs: 60_000, cores: 0.5, memory: 64 * MiB }));
    await rest.waitFor(running.id, ['running']);
    expect((await usage()).allocated.cpu.cores).toBeCloseTo(before.allocated.cpu.cores + 0.5);

    const cancelled = await rest.delete<Job>(`/api/v1/jobs/${running.id}`);
    expect(cancelled.status).toBe(200);
    expect(cancelled.body).toMatchObject({ id: running.id, status: 'failed', error: 'cancelled' });
    expect(await usage()).toEqual(before);
    expect(await rest.delete(`/api/v1/jobs/${running.id}`)).toEqual({ status: 409, body: { error: `job ${running.id} has already failed` } });

    // A job that never started is cancelled without ever running.
    await rest.put('/api/v1/device/config', { onboarded: { cpu: { cores: 0.2 }, memory: { size: GiB } } });
    try {
      const waiting = await rest.submit(nullJob({ cores: 1 }));
      expect((await rest.delete<Job>(`/api/v1/jobs/${waiting.id}`)).body).toMatchObject({ status: 'failed', error: 'cancelled', exit_code: null });
    } finally {
      await rest.put('/api/v1/device/config', { onboarded: null });
    }
  });
});

describe('resources', () => {
  it('usage moves when resources are allocated, held by a running job, and released', async () => {
    const base = await usage();
    expect(base.onboarded).toEqual(base.capacity);
    expect(base.free).toEqual({
      cpu: { cores: base.onboarded.cpu.cores - base.allocated.cpu.cores },
      memory: { size: base.onboarded.memory.size - base.allocated.memory.size },
      storage: { size: base.onboarded.storage.size - base.allocated.storage.size },
    });

    const created = await rest.post('/api/v1/allocations', { resources: { cpu: { cores: 1 }, memory: { size: 256 * MiB } } });
    expect(created.status).toBe(201);
    expect(created.body).toMatchObject({ resources: { cpu: { cores: 1 }, memory: { size: 256 * MiB }, storage: { size: 0 } }, released_at: null });
    const allocated = await usage();
    expect(allocated.allocated.cpu.cores).toBeCloseTo(base.allocated.cpu.cores + 1);
    expect(allocated.free.memory.size).toBe(base.free.memory.size - 256 * MiB);
    expect((await rest.get('/api/v1/allocations')).body.map((a: { id: string }) => a.id)).toContain(created.body.id);

    const job = await rest.submit(nullJob({ durationMs: 60_000, cores: 0.5, memory: 32 * MiB }));
    await rest.waitFor(job.id, ['running']);
    const running = await usage();
    expect(running.allocated.cpu.cores).toBeCloseTo(allocated.allocated.cpu.cores + 0.5);
    expect(running.allocated.memory.size).toBe(allocated.allocated.memory.size + 32 * MiB);
    expect((await rest.get('/api/v1/device/status')).body.status).toBe('busy');

    await rest.delete(`/api/v1/jobs/${job.id}`);
    expect(await usage()).toEqual(allocated);
    const released = await rest.delete(`/api/v1/allocations/${created.body.id}`);
    expect(released).toMatchObject({ status: 200, body: { id: created.body.id } });
    expect(released.body.released_at).not.toBeNull();
    expect(await usage()).toEqual(base);
    expect((await rest.get('/api/v1/allocations')).body.map((a: { id: string }) => a.id)).not.toContain(created.body.id);
    expect((await rest.get('/api/v1/allocations?all=true')).body.map((a: { id: string }) => a.id)).toContain(created.body.id);
  });

  it('refuses to over-commit with 409 naming the resource that is short', async () => {
    const { free } = await usage();
    const answer = await rest.post('/api/v1/allocations', { resources: { cpu: { cores: free.cpu.cores + 1 }, memory: { size: 0 } } });
    expect(answer.status).toBe(409);
    expect(answer.body.error).toMatch(/^not enough cpu: \d+(\.\d+)? cores asked, \d+(\.\d+)? cores free of \d+(\.\d+)? cores onboarded$/);
    const memory = await rest.post('/api/v1/allocations', { resources: { cpu: { cores: 0 }, memory: { size: free.memory.size + 1 } } });
    expect(memory.status).toBe(409);
    expect(memory.body.error).toMatch(/^not enough memory/);
  });

  it('keeps a job that does not fit pending with the reason, lets smaller ones pass, and starts it when resources free up', async () => {
    await rest.put('/api/v1/device/config', { onboarded: { cpu: { cores: 1 }, memory: { size: 512 * MiB } } });
    try {
      // Every job holds some cpu (zero asks get jobs.default_resources): 'small' fits what 'big' leaves.
      const big = await rest.submit(nullJob({ name: 'big', durationMs: 60_000, cores: 0.75 }));
      await rest.waitFor(big.id, ['running']);
      const next = await rest.submit(nullJob({ name: 'next', cores: 0.5, stdout: 'done' }));
      const waiting = await until('the pending reason', async () => {
        const job = await rest.job(next.id);
        return job.pending_reason ? job : undefined;
      });
      expect(waiting).toMatchObject({ status: 'pending', pending_reason: 'waiting for resources: not enough cpu: 0.5 cores asked, 0.25 cores free of 1 core onboarded' });
      const small = await rest.submit(nullJob({ name: 'small', cores: 0.25, memory: 16 * MiB }));
      expect(await rest.waitFor(small.id)).toMatchObject({ status: 'completed' });
      expect(await rest.job(next.id)).toMatchObject({ status: 'pending' });

      await rest.delete(`/api/v1/jobs/${big.id}`);
      expect(await rest.waitFor(next.id)).toMatchObject({ status: 'completed', pending_reason: null });
    } finally {
      await rest.put('/api/v1/device/config', { onboarded: null });
    }
  });

  it('starts a waiting job when a bigger share is onboarded or an allocation is released', async () => {
    await rest.put('/api/v1/device/config', { onboarded: { cpu: { cores: 1 }, memory: { size: 512 * MiB } } });
    try {
      const hog = await rest.post('/api/v1/allocations', { resources: { cpu: { cores: 1 }, memory: { size: 0 } } });
      const first = await rest.submit(nullJob({ cores: 0.5 }));
      await until('a pending reason', async () => (await rest.job(first.id)).pending_reason !== null);
      await rest.delete(`/api/v1/allocations/${hog.body.id}`);
      expect(await rest.waitFor(first.id)).toMatchObject({ status: 'completed' });

      const second = await rest.submit(nullJob({ cores: 2 }));
      await until('a pending reason', async () => (await rest.job(second.id)).pending_reason !== null);
      await rest.put('/api/v1/device/config', { onboarded: null });
      expect(await rest.waitFor(second.id)).toMatchObject({ status: 'completed' });
    } finally {
      await rest.put('/api/v1/device/config', { onboarded: null });
    }
  });
});

describe('device', () => {
  it('reports the device and keeps the settings the operator puts', async () => {
    const status = await rest.get('/api/v1/device/status');
    expect(status.status).toBe(200);
    expect(status.body).toMatchObject({ id: node.did, status: 'online', location: {} });
    expect(status.body.resources).toEqual((await usage()).onboarded);
    expect(Math.abs(Date.parse(status.body.last_seen) - Date.now())).toBeLessThan(60_000);

    const put = await rest.put('/api/v1/device/config', { name: 'rack-7', location: { region: 'eu', country: 'NL', city: 'Delft' } });
    expect(put).toEqual({ status: 200, body: { name: 'rack-7', location: { region: 'eu', country: 'NL', city: 'Delft' }, labels: {}, onboarded: null } });
    expect((await rest.get('/api/v1/device/status')).body).toMatchObject({ name: 'rack-7', location: { city: 'Delft' } });
  });
});

describe('listing', () => {
  it('lists jobs newest first (oldest first with order=asc), with the total, filtered by status, with limit and offset', async () => {
    const ids: string[] = [];
    for (let i = 0; i < 3; i++) ids.push((await rest.submit(nullJob({ name: `listed-${i}` }))).id);
    for (const id of ids) await rest.waitFor(id);
    const { jobs: all, total } = await rest.jobs('/api/v1/jobs?limit=1000');
    expect(total).toBe(all.length);
    expect(all.filter((j) => ids.includes(j.id)).map((j) => j.id)).toEqual([...ids].reverse());
    const asc = (await rest.jobs('/api/v1/jobs?limit=1000&order=asc')).jobs;
    expect(asc.filter((j) => ids.includes(j.id)).map((j) => j.id)).toEqual(ids);
    const completed = (await rest.jobs('/api/v1/jobs?status=completed&limit=1000')).jobs;
    expect(completed.every((j) => j.status === 'completed')).toBe(true);
    const failedOrPending = (await rest.jobs('/api/v1/jobs?status=failed,pending&limit=1000')).jobs;
    expect(failedOrPending.every((j) => j.status === 'failed' || j.status === 'pending')).toBe(true);
    expect(completed.length + failedOrPending.length).toBe(all.length);
    const page = await rest.jobs(`/api/v1/jobs?limit=2&offset=1`);
    expect(page.jobs.map((j) => j.id)).toEqual(all.slice(1, 3).map((j) => j.id));
    expect(page.total).toBe(total);
  });
});

describe('bad requests', () => {
  const expectError = (answer: { status: number; body: { error?: unknown } }, status: number, pattern: RegExp) => {
    expect(answer.status).toBe(status);
    expect(Object.keys(answer.body)).toEqual(['error']);
    expect(answer.body.error).toMatch(pattern);
  };

  it('answers 400 naming the field for a bad spec, and stores nothing', async () => {
    const before = (await rest.jobs()).total;
    expectError(await rest.post('/api/v1/jobs', '{"name": "x",'), 400, /job spec: the request body is not valid JSON/);
    expectError(await rest.post('/api/v1/jobs', { name: 'x', resources: { cpu: { cores: 1 }, memory: { size: 1 } } }), 400, /^invalid job spec: image is required$/);
    expectError(await rest.post('/api/v1/jobs', { ...nullJob(), resources: { cpu: { cores: -1 }, memory: { size: 1 } } }), 400, /resources\.cpu\.cores: /);
    expectError(await rest.post('/api/v1/jobs', { ...nullJob(), imgae: 'typo' }), 400, /imgae/);
    expectError(await rest.post('/api/v1/jobs', { ...nullJob(), environment: { 'A=B': 'x' } }), 400, /environment/);
    expectError(await rest.post('/api/v1/jobs', { ...nullJob(), executor: 'warp-drive' }), 400, /^executor: no executor named "warp-drive" on this node \(available: docker, null\)$/);
    expect((await rest.jobs()).total).toBe(before);
  });

  it('answers 404 for unknown job ids on every job route', async () => {
    const unknown = '00000000-0000-4000-8000-000000000000';
    for (const id of [unknown, 'not-a-uuid']) {
      expectError(await rest.get(`/api/v1/jobs/${id}`), 404, new RegExp(`^job ${id} not found$`));
      expectError(await rest.delete(`/api/v1/jobs/${id}`), 404, /not found/);
      expectError(await rest.get(`/api/v1/jobs/${id}/logs`), 404, /not found/);
      expectError(await rest.get(`/api/v1/jobs/${id}/logs?follow=true`), 404, /not found/);
    }
    expectError(await rest.delete(`/api/v1/allocations/${unknown}`), 404, /not found/);
  });

  it('answers 400 for bad list parameters, allocations and device settings', async () => {
    expectError(await rest.get('/api/v1/jobs?status=done'), 400, /^status: 'done' is not one of pending, running, completed, failed$/);
    expectError(await rest.get('/api/v1/jobs?limit=0'), 400, /^limit: /);
    expectError(await rest.get('/api/v1/jobs?offset=-1'), 400, /^offset: /);
    expectError(await rest.post('/api/v1/allocations', { resources: { cpu: { cores: 1 } } }), 400, /resources\.memory/);
    expectError(await rest.put('/api/v1/device/config', { location: { planet: 'Mars' } }), 400, /planet/);
    const { capacity } = await usage();
    expectError(
      await rest.put('/api/v1/device/config', { onboarded: { cpu: { cores: capacity.cpu.cores + 1 }, memory: { size: 1 } } }),
      400,
      /^onboarded\.cpu\.cores: \d+ cores is more than this machine has/,
    );
  });
});
