// Followers of job output (`GET /api/v1/jobs/{id}/logs?follow=true`) against a real node
// process: slow followers cost the node a bounded buffer each, never the log, and how many
// may follow at once is capped per job and per node (issue 26).
import { readFileSync } from 'node:fs';
import { connect, type Socket } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { describe, expect, it, onTestFinished } from 'vitest';
import { RestClient } from '../../client/rest.js';
import { dockerForTests, TEST_IMAGE } from '../helpers/docker.js';
import { waitFor } from '../helpers/network.js';
import type { NodeProcess } from '../helpers/node.js';
import { nodeStarter } from '../helpers/started.js';
import { MiB, nullJob, Rest } from '../jobs/helpers.js';

const { problem } = await dockerForTests('log follower tests');
const start = nodeStarter({ network: { enabled: false }, jobs: { stop_grace_s: 1 } });

/** Resident memory of the node process, in MiB. */
const rssMiB = (node: NodeProcess): number => Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${node.pid}/status`, 'utf8'))![1]) / 1024;

interface Follower {
  socket: Socket;
  status: number;
}

/**
 * A follower on a raw connection: it reads the response head, then (paused) reads nothing more,
 * the slowest reader there is, so whatever the node sends it waits in the node's buffers.
 */
function follow(node: NodeProcess, path: string, opts: { paused: boolean }): Promise<Follower> {
  const { hostname, port } = new URL(node.url);
  return new Promise((resolve, reject) => {
    const socket = connect(Number(port), hostname);
    let head = '';
    const onData = (d: Buffer) => {
      head += d.toString('latin1');
      if (!head.includes('\r\n\r\n')) return;
      socket.off('data', onData);
      if (opts.paused) socket.pause();
      else socket.on('data', () => undefined);
      resolve({ socket, status: Number(/^HTTP\/1\.1 (\d{3})/.exec(head)?.[1] ?? 0) });
    };
    socket.on('data', onData);
    socket.on('error', reject);
    socket.setTimeout(20_000, () => socket.destroy(new Error(`no response head for ${path} within 20 s`)));
    socket.write(`GET ${path} HTTP/1.1\r\nHost: ${hostname}:${port}\r\n\r\n`);
  }).then((f) => {
    const follower = f as Follower;
    follower.socket.setTimeout(0);
    onTestFinished(() => void follower.socket.destroy());
    return follower;
  });
}

/**
 * 32 MiB of output in 4 KiB lines, each starting with its number, so order shows. Long lines
 * keep Docker's own json-file log (64 MiB, two files) from rotating under the follow that
 * captures it, which loses lines of short ones.
 */
const LINES = 8192;
const LINE_BYTES = 4096;
const LOG_BYTES = LINES * LINE_BYTES;
const lineOf = (i: number) => String(i).padStart(8, '0') + ' '.repeat(LINE_BYTES - 9) + '\n';
const PRINT_LINES = `i=0; while [ $i -lt ${LINES} ]; do printf '%08d%${LINE_BYTES - 9}s\\n' $i; i=$((i+1)); done`;

describe.skipIf(problem !== null)('slow followers of a 32 MiB log', () => {
  let node: NodeProcess;
  let jobId: string;

  it('a follower that keeps up gets the whole log in order, and the stream ends when the job ends', async () => {
    node = await start();
    const rest = new Rest(node.url);
    const job = await rest.submit({
      name: 'big-log',
      image: TEST_IMAGE,
      command: ['sh', '-c', PRINT_LINES],
      resources: { cpu: { cores: 0.5 }, memory: { size: 64 * MiB } },
    });
    jobId = job.id;
    const parts: string[] = [];
    const events: string[] = [];
    let end: Record<string, unknown> | undefined;
    const client = new RestClient({ url: node.url });
    const ac = new AbortController();
    const deadline = setTimeout(() => ac.abort(), 90_000);
    try {
      for await (const ev of client.events(`/api/v1/jobs/${job.id}/logs?follow=true`, { signal: ac.signal })) {
        if (events.at(-1) !== ev.event) events.push(ev.event);
        const data = JSON.parse(ev.data) as Record<string, unknown>;
        if (ev.event === 'log') parts.push(data.data as string);
        if (ev.event === 'end') end = data;
      }
    } finally {
      clearTimeout(deadline);
    }
    expect(end).toMatchObject({ id: job.id, status: 'completed', exit_code: 0 });
    expect(events[0]).toBe('status');
    expect(events.at(-1)).toBe('end');
    const text = parts.join('');
    expect(text.length).toBe(LOG_BYTES);
    const whole = Array.from({ length: LINES }, (_, i) => lineOf(i)).join('');
    expect(text === whole, 'the output, in order').toBe(true);
  }, 120_000);

  it('8 followers that read nothing, asking for 8 MiB pages, cost the node a bounded buffer each, and it is returned when they close', async () => {
    expect(jobId, 'the job of the test before').toBeDefined();
    const path = `/api/v1/jobs/${jobId}/logs?follow=true&limit=8388608`;
    await sleep(1000);
    const before = rssMiB(node);
    const followers = await Promise.all(Array.from({ length: 8 }, () => follow(node, path, { paused: true })));
    expect(followers.map((f) => f.status)).toEqual(Array(8).fill(200));
    // The old route read on without waiting for the sockets: 8 × 8 MiB pages, copied, grew the
    // node by 400-650 MiB and kept it after they closed. Paged at the sockets' pace, what the
    // node handles is the pages the kernel's socket buffers take (some MiB each), and its growth
    // is the garbage of those (some 40 MiB measured).
    let peak = before;
    for (let i = 0; i < 12; i++) {
      await sleep(500);
      peak = Math.max(peak, rssMiB(node));
    }
    expect(peak - before, `RSS ${before.toFixed(0)} → ${peak.toFixed(0)} MiB with 8 stalled followers`).toBeLessThan(96);

    for (const f of followers) f.socket.destroy();
    // An idle node may not collect its garbage at all: some ordinary requests between looks give
    // its collector the allocations it runs on, so what stays is what is still held.
    await waitFor('the node to be within 64 MiB of its RSS before the followers', async () => {
      for (let i = 0; i < 50; i++) await fetch(`${node.url}/api/v1/jobs?limit=50`).then((r) => r.arrayBuffer());
      return rssMiB(node) - before < 64;
    }, { timeoutMs: 20_000, intervalMs: 200 });
    // Their slots are free again: as many followers are admitted as before.
    const again = await waitFor('8 followers admitted again', async () => {
      const fs = await Promise.all(Array.from({ length: 8 }, () => follow(node, path, { paused: false })));
      if (fs.every((f) => f.status === 200)) return fs;
      fs.forEach((f) => f.socket.destroy());
      return false;
    }, { timeoutMs: 15_000, intervalMs: 1000 });
    again.forEach((f) => f.socket.destroy());
  }, 90_000);
});

interface Attempt {
  status: number;
  retryAfter: string | null;
  /** The error of a refusal. */
  error?: string;
  close(): void;
}

/** A follower over fetch: admitted (200, its events left to flow until close) or refused with its error. */
async function attempt(node: NodeProcess, path: string): Promise<Attempt> {
  const ac = new AbortController();
  const res = await fetch(node.url + path, { signal: AbortSignal.any([ac.signal, AbortSignal.timeout(20_000)]) });
  const close = () => ac.abort();
  onTestFinished(close);
  const answer = { status: res.status, retryAfter: res.headers.get('retry-after'), close };
  if (res.status === 200) {
    res.body?.pipeTo(new WritableStream()).catch(() => undefined);
    return answer;
  }
  const text = await res.text();
  return { ...answer, error: (JSON.parse(text) as { error: string }).error };
}

const running = (rest: Rest) => rest.submit(nullJob({ durationMs: 60_000, stdout: 'one\ntwo\n' }));
const followPath = (id: string) => `/api/v1/jobs/${id}/logs?follow=true`;

describe('follower caps', () => {
  it('refuses the 9th follower of a job (rest.max_log_followers_per_job, default 8) with 503 and Retry-After; page reads and other jobs are still served', async () => {
    const node = await start();
    const rest = new Rest(node.url);
    const [a, b] = [await running(rest), await running(rest)];
    const eight = await Promise.all(Array.from({ length: 8 }, () => attempt(node, followPath(a.id))));
    expect(eight.map((f) => f.status)).toEqual(Array(8).fill(200));
    const ninth = await attempt(node, followPath(a.id));
    expect(ninth.status, ninth.error).toBe(503);
    expect(ninth.retryAfter).toMatch(/^\d+$/);
    expect(ninth.error).toBe(`job ${a.id} has 8 log followers open, as many as rest.max_log_followers_per_job (8) allows; close one or retry later`);
    // Controls: a page read is no follower, and another job has followers of its own.
    expect((await rest.get(`/api/v1/jobs/${a.id}/logs`)).status).toBe(200);
    expect((await attempt(node, followPath(b.id))).status).toBe(200);
  }, 60_000);

  it('refuses a follower past rest.max_log_followers with 503 and Retry-After, and admits one again once another closed', async () => {
    const node = await start({ config: { rest: { max_log_followers: 3, max_log_followers_per_job: 2 } } });
    const rest = new Rest(node.url);
    const [a, b, c] = [await running(rest), await running(rest), await running(rest)];

    const ofA = [await attempt(node, followPath(a.id)), await attempt(node, followPath(a.id))];
    expect(ofA.map((f) => f.status)).toEqual([200, 200]);
    const thirdOfA = await attempt(node, followPath(a.id));
    expect(thirdOfA.status).toBe(503);
    expect(thirdOfA.error).toBe(`job ${a.id} has 2 log followers open, as many as rest.max_log_followers_per_job (2) allows; close one or retry later`);

    expect((await attempt(node, followPath(b.id))).status).toBe(200);
    const ofC = await attempt(node, followPath(c.id));
    expect(ofC.status, ofC.error).toBe(503);
    expect(ofC.retryAfter).toMatch(/^\d+$/);
    expect(ofC.error).toBe('this node has 3 log followers open, as many as rest.max_log_followers (3) allows; close one or retry later');

    // One of a's followers leaves: its slot is free once its last poll answered.
    ofA[0].close();
    await waitFor('a follower of job c admitted', async () => {
      const f = await attempt(node, followPath(c.id));
      return f.status === 200;
    }, { timeoutMs: 15_000, intervalMs: 500 });
  }, 60_000);
});
