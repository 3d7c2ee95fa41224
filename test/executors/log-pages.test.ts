// Pages of a job's log as its followers read them (actors/executors/logfile.ts), on real files:
// a small page is read on the event loop, never waiting behind libuv's pool (busy at a Docker
// job's end with its final commit), and large pages, long chunks and offsets inside a chunk read
// as before through the pool.
import { pbkdf2 } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { JobLogs } from '../../actors/executors/logfile.js';

let dir: string;
let logs: JobLogs;

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'dms-log-pages-'));
  logs = new JobLogs(dir);
});

afterAll(() => rm(dir, { recursive: true, force: true }));

async function logOf(jobId: string, lines: string[]): Promise<void> {
  const writer = await logs.create(jobId);
  for (const line of lines) writer.append('stdout', line);
  await writer.close();
}

describe('a log page', () => {
  it('is read while every thread of libuv\'s pool is busy: a follower\'s page does not wait behind it', async () => {
    const jobId = '00000000-0000-4000-8000-000000000001';
    await logOf(jobId, ['hi\n']);
    const threads = Number(process.env.UV_THREADPOOL_SIZE ?? 4);
    let hashed = 0;
    // Each holds one of the pool's threads for a while (hundreds of ms here).
    const busy = Array.from({ length: threads }, () => new Promise<void>((resolve) => pbkdf2('busy', 'salt', 400_000, 64, 'sha512', () => (hashed++, resolve()))));
    const page = await logs.readPage(jobId, 0, 64 * 1024);
    expect(hashed).toBe(0);
    expect(page.chunks.map((c) => c.data)).toEqual(['hi\n']);
    await Promise.all(busy);
  });

  it('larger than the event loop reads, one chunk longer than the page, and from inside a chunk, reads whole chunks', async () => {
    const jobId = '00000000-0000-4000-8000-000000000002';
    const long = `${'x'.repeat(200 * 1024)}\n`;
    const lines = [...Array.from({ length: 2_000 }, (_, i) => `line ${i}\n`), long, 'after\n'];
    await logOf(jobId, lines);
    // 2,000 chunks in pages of 128 KiB: every line once, in order.
    const seen: string[] = [];
    let from = 0;
    for (;;) {
      const page = await logs.readPage(jobId, from, 128 * 1024);
      seen.push(...page.chunks.map((c) => c.data));
      if (page.next === from || page.next >= page.size) break;
      from = page.next;
    }
    expect(seen).toEqual(lines);
    // An offset inside a chunk starts at the next whole one.
    const first = await logs.readPage(jobId, 0, 64 * 1024);
    const inside = await logs.readPage(jobId, 5, 64);
    expect(inside.chunks[0]?.data).toBe(lines[1]);
    expect(first.chunks[0]?.data).toBe(lines[0]);
  });
});
