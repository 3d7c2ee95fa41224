// Attacks that need the real Docker engine, against real node processes: an image reference
// that made the engine redirect docker-modem into an unhandled error (and crashed the node at
// every restart), containers without limits, and output too large to hold.
import { join } from 'node:path';
import sqlite3 from 'sqlite3';
import { afterAll, describe, expect, it } from 'vitest';
import type { Job, JobSpecInput } from '../../behaviors/jobs/schema.js';
import { openStorage } from '../../storage/index.js';
import { dockerForTests, stopDockerNodes, TEST_IMAGE } from '../helpers/docker.js';
import type { NodeProcess } from '../helpers/node.js';
import { MiB, Rest, startJobNode, textOf, until } from './helpers.js';

const { docker, problem } = await dockerForTests('Docker attack tests');

const nodes: NodeProcess[] = [];
afterAll(() => stopDockerNodes(docker, nodes));

/** Rewrites a stored job's image behind the node's back, as a database from an older release could hold it. */
function setImage(db: string, id: string, image: string): Promise<void> {
  return new Promise((resolve, reject) => {
    const conn = new sqlite3.Database(db, (e) => {
      if (e) return reject(e);
      conn.run('UPDATE job SET image = ? WHERE id = ?', [image, id], (err) => conn.close(() => (err ? reject(err) : resolve())));
    });
  });
}

describe.skipIf(problem !== null)('docker attacks on a node', () => {
  it('fails, with the reason, pending jobs stored with a bad image when the node restarts, and stays up', async () => {
    const first = await startJobNode();
    nodes.push(first);
    await first.stop();
    const db = join(first.home, 'dms.sqlite');
    const storage = await openStorage(db);
    const seeded: Job[] = [];
    for (let i = 0; i < 2; i++) seeded.push(await storage.jobs.create({ name: `bad-${i}`, image: TEST_IMAGE, command: ['true'], resources: { cpu: { cores: 0.1 }, memory: { size: 16 * MiB } } }));
    await storage.close();
    await setImage(db, seeded[0].id, '//x/y');
    await setImage(db, seeded[1].id, '../../containers/json?all=1#');

    const restarted = await startJobNode({ home: first.home });
    nodes.push(restarted);
    const rest = new Rest(restarted.url);
    for (const job of seeded) {
      const failed = await rest.waitFor(job.id, ['failed'], 60_000);
      expect(failed.error).toMatch(/^not started: image: not a Docker image reference: /);
    }
    expect((await fetch(`${restarted.url}/health`)).status).toBe(200);
    // And the node still runs jobs.
    const ok = await rest.submit({ name: 'after', image: TEST_IMAGE, command: ['echo', 'still here'], resources: { cpu: { cores: 0.1 }, memory: { size: 16 * MiB } } });
    expect(await rest.waitFor(ok.id, ['completed', 'failed'], 60_000)).toMatchObject({ status: 'completed' });

    // A third start sees them ended: nothing is retried.
    await restarted.stop();
    const third = await startJobNode({ home: first.home });
    nodes.push(third);
    for (const job of seeded) expect((await new Rest(third.url).job(job.id)).status).toBe('failed');
    expect(third.logs()).not.toMatch(/uncaught/);
  }, 120_000);

  it('runs a job asking for no resources under the default limits, a pids limit and no-new-privileges', async () => {
    const node = await startJobNode({ jobs: { default_resources: { cores: 0.5, memory_bytes: 64 * MiB }, pids_limit: 50 } });
    nodes.push(node);
    const rest = new Rest(node.url);
    const job = await rest.submit({ name: 'greedy', image: TEST_IMAGE, command: ['sleep', '600'], resources: { cpu: { cores: 0 }, memory: { size: 0 } } });
    const running = await rest.waitFor(job.id, ['running'], 60_000);
    const info = await docker.getContainer(running.container_id!).inspect();
    expect(info.HostConfig).toMatchObject({
      NanoCpus: 500_000_000,
      Memory: 64 * MiB,
      MemorySwap: 64 * MiB,
      PidsLimit: 50,
      SecurityOpt: ['no-new-privileges'],
    });
    // The pids limit holds inside the container: 60 sleeping processes cannot all start.
    const forks = await rest.submit({
      name: 'forks',
      image: TEST_IMAGE,
      command: ['sh', '-c', 'n=0; while [ $n -lt 60 ]; do sleep 30 & n=$((n+1)); done; echo started-all'],
      resources: { cpu: { cores: 0.1 }, memory: { size: 32 * MiB } },
    });
    const ended = await rest.waitFor(forks.id, ['completed', 'failed'], 90_000);
    expect(textOf((await rest.get(`/api/v1/jobs/${forks.id}/logs`)).body.chunks, 'stderr')).toMatch(/fork|resource|Resource/i);
    expect(ended.status).toBe('failed');
    await rest.delete(`/api/v1/jobs/${job.id}`);
  }, 120_000);

  it('never runs or counts a job without limits: cores round up to 0.01 at least, the container gets 6 MiB at least', async () => {
    const node = await startJobNode();
    nodes.push(node);
    const rest = new Rest(node.url);
    const usage = async () => (await rest.get('/api/v1/resources/usage')).body as { allocated: { cpu: { cores: number } } };
    // 1e-10 cores used to be stored, held as 0 cores and run with NanoCpus 0: no limit at all.
    // Now it is the floor on the record, in the ledger and in the container; 1 byte of memory
    // (which the engine refuses) is the engine's least, on the record as in the container.
    const tiny = await rest.submit({ name: 'tiny', image: TEST_IMAGE, command: ['sleep', '600'], resources: { cpu: 1e-10, memory: { size: 1 } } });
    expect(tiny.resources).toMatchObject({ cpu: { cores: 0.01 }, memory: { size: 6 * MiB } });
    const running = await rest.waitFor(tiny.id, ['running'], 60_000);
    expect((await docker.getContainer(running.container_id!).inspect()).HostConfig).toMatchObject({ NanoCpus: 10_000_000, Memory: 6 * MiB });
    expect((await usage()).allocated.cpu.cores).toBe(0.01);
    await rest.delete(`/api/v1/jobs/${tiny.id}`);
    // A fraction of a millicore is rounded up, the same on the record, in the ledger and in the container's limit.
    const ok = await rest.submit({ name: 'ok', image: TEST_IMAGE, command: ['sleep', '600'], resources: { cpu: 0.0101, memory: '6MiB' } });
    expect(ok.resources).toMatchObject({ cpu: { cores: 0.011 }, memory: { size: 6 * MiB } });
    const okRunning = await rest.waitFor(ok.id, ['running'], 60_000);
    expect((await docker.getContainer(okRunning.container_id!).inspect()).HostConfig).toMatchObject({ NanoCpus: 11_000_000, Memory: 6 * MiB });
    await expect.poll(async () => (await usage()).allocated.cpu.cores, { timeout: 10_000 }).toBe(0.011);
    // Allocations and the onboarded share round the same way: no amount counts as 0.
    const allocation = await rest.post('/api/v1/allocations', { resources: { cpu: 0.001, memory: '1MiB' } });
    expect(allocation.status).toBe(201);
    expect(allocation.body.resources).toMatchObject({ cpu: { cores: 0.01 }, memory: { size: MiB } });
    expect((await usage()).allocated.cpu.cores).toBe(0.021);
    expect((await rest.delete(`/api/v1/allocations/${allocation.body.id}`)).status).toBe(200);
    const share = await rest.put('/api/v1/device/config', { onboarded: { cpu: 1e-10, memory: '1GiB' } });
    expect(share.status, JSON.stringify(share.body)).toBe(200);
    expect(share.body.onboarded.cpu.cores).toBe(0.01);
    expect((await rest.put('/api/v1/device/config', { onboarded: null })).status).toBe(200);
    await rest.delete(`/api/v1/jobs/${ok.id}`);
  }, 120_000);

  it('cuts stored output at jobs.max_log_bytes, marks the cut, and serves it in bounded pages', async () => {
    const cap = 256 * 1024;
    const node = await startJobNode({ jobs: { max_log_bytes: cap } });
    nodes.push(node);
    const rest = new Rest(node.url);
    // 20 MiB of output from a job that may keep 256 KiB of it.
    const job = await rest.submit({ name: 'chatty', image: TEST_IMAGE, command: ['sh', '-c', 'yes 0123456789abcdef | head -c 20971520'], resources: { cpu: { cores: 0.5 }, memory: { size: 64 * MiB } } });
    expect(await rest.waitFor(job.id, ['completed', 'failed'], 90_000)).toMatchObject({ status: 'completed' });

    const logFile = join(node.home, 'data', 'job-logs', `${job.id}.log`);
    const { statSync } = await import('node:fs');
    // The cap counts stored bytes (one JSON line per chunk): full up to the last chunk that fit, plus the marker line.
    expect(statSync(logFile).size).toBeLessThanOrEqual(cap + 200);
    expect(statSync(logFile).size).toBeGreaterThan(cap - 200);

    // Paged: each page is bounded, pages continue where the last ended, the last one says done.
    const limit = 64 * 1024;
    const pages: { chunks: { stream: string; data: string }[]; next: number; more: boolean; done: boolean }[] = [];
    let from = 0;
    for (let i = 0; i < 100; i++) {
      const page = await rest.get(`/api/v1/jobs/${job.id}/logs?from=${from}&limit=${limit}`);
      expect(page.status).toBe(200);
      expect(page.body.next).toBeGreaterThan(from);
      expect(page.body.next - from).toBeLessThanOrEqual(limit);
      pages.push(page.body);
      from = page.body.next;
      if (page.body.done) break;
    }
    expect(pages.length).toBeGreaterThan(3);
    expect(pages.at(-1)).toMatchObject({ done: true, more: false, next: statSync(logFile).size });
    const all = pages.flatMap((p) => p.chunks);
    expect(textOf(all, 'stderr')).toBe(`[dms] output cut at ${cap} bytes\n`);
    expect(all.at(-1)!.data).toBe(`[dms] output cut at ${cap} bytes\n`);
    const out = textOf(all);
    expect(out.length).toBeGreaterThan(cap / 10);
    expect(out.length).toBeLessThanOrEqual(cap);
    expect(out).toBe('0123456789abcdef\n'.repeat(Math.ceil(out.length / 17)).slice(0, out.length));

    // Without parameters: the first page, in the shape callers already read.
    const first = await rest.get(`/api/v1/jobs/${job.id}/logs`);
    expect(first.body).toMatchObject({ id: job.id, status: 'completed', exit_code: 0, done: true, more: false });
    expect(textOf(first.body.chunks)).toBe(out);
  }, 120_000);

  it('follow from=end tails from the current end, from the start by default, and never replays earlier output', async () => {
    const node = await startJobNode();
    nodes.push(node);
    const rest = new Rest(node.url);
    const job = await rest.submit({
      name: 'ticker',
      image: TEST_IMAGE,
      command: ['sh', '-c', 'echo early; i=0; while [ $i -lt 6 ]; do sleep 0.5; echo tick-$i; i=$((i+1)); done'],
      resources: { cpu: { cores: 0.2 }, memory: { size: 32 * MiB } },
    });
    await until('the early line', async () => textOf((await rest.get(`/api/v1/jobs/${job.id}/logs`)).body.chunks).includes('early'), 60_000);
    const tail = (await rest.events(`/api/v1/jobs/${job.id}/logs?follow=true&from=end`)).filter((e) => e.event === 'log').map((e) => e.data);
    expect(textOf(tail)).not.toContain('early');
    expect(textOf(tail)).toMatch(/tick-5\n$/);
    const whole = (await rest.events(`/api/v1/jobs/${job.id}/logs?follow=true`)).filter((e) => e.event === 'log').map((e) => e.data);
    expect(textOf(whole)).toBe(`early\n${[0, 1, 2, 3, 4, 5].map((i) => `tick-${i}\n`).join('')}`);
  }, 120_000);
});
