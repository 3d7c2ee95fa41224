/**
 * A container's output reaches its job's log whole and once, even when the engine's follow ends
 * before the last frames (actors/executors/container-output.ts): after the container exits, the
 * log is read again since the last frame followed and only newer frames are appended.
 *
 * The engine's early end cannot be caused on purpose, so each of its shapes is made: against
 * the real engine, a follow that saw nothing (the empty output a CI run once showed) and a full
 * follow (nothing twice); and with a container whose follow stops half-way (a stand-in for the
 * engine, giving the engine's own multiplexed frames) for the partial case.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PassThrough } from 'node:stream';
import type Docker from 'dockerode';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ContainerOutput, timestampNs } from '../../actors/executors/container-output.js';
import { JobLogs } from '../../actors/executors/logfile.js';
import { dockerForTests, TEST_IMAGE } from '../helpers/docker.js';

const { docker, problem } = await dockerForTests('container output tests');

let dir: string;
let logs: JobLogs;
let seq = 0;
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'dms-container-output-'));
  logs = new JobLogs(dir);
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

/** What the job's log holds, per stream, in order. */
async function logged(jobId: string): Promise<{ stdout: string; stderr: string }> {
  const page = await logs.readPage(jobId, 0, 1024 * 1024);
  const of = (s: string) => page.chunks.filter((c) => c.stream === s).map((c) => c.data).join('');
  return { stdout: of('stdout'), stderr: of('stderr') };
}

const lines = (n: number, prefix: string) => Array.from({ length: n }, (_, i) => `${prefix}${i + 1}\n`).join('');

describe.skipIf(problem !== null)('against the engine', () => {
  /** A container that printed 1..200 on stdout and e1..e50 on stderr, and exited. */
  async function exited(): Promise<Docker.Container> {
    const container = await docker.createContainer({
      Image: TEST_IMAGE,
      Cmd: ['sh', '-c', 'i=1; while [ $i -le 200 ]; do echo $i; if [ $((i % 4)) = 0 ]; then echo e$((i / 4)) >&2; fi; i=$((i + 1)); done'],
      HostConfig: { NetworkMode: 'none', LogConfig: { Type: 'json-file', Config: {} } },
    });
    await container.start();
    expect((await container.wait()).StatusCode).toBe(0);
    return container;
  }

  it('reads the whole output after exit when the follow saw none of it', { timeout: 30_000 }, async () => {
    const container = await exited();
    const job = `job-${++seq}`;
    await new ContainerOutput(container, docker.modem, await logs.create(job), String).finish();
    expect(await logged(job)).toEqual({ stdout: lines(200, ''), stderr: lines(50, 'e') });
    await container.remove({ force: true });
  });

  it('appends nothing twice after a follow that saw all of it', { timeout: 30_000 }, async () => {
    const container = await exited();
    const job = `job-${++seq}`;
    const output = new ContainerOutput(container, docker.modem, await logs.create(job), String);
    await output.follow();
    await output.finish();
    expect(await logged(job)).toEqual({ stdout: lines(200, ''), stderr: lines(50, 'e') });
    await container.remove({ force: true });
  });
});

describe('a follow the engine ended early', () => {
  /** The engine's multiplexed frame: stream type, three zero bytes, the payload's length, then the timestamp and the text. */
  const frame = (stream: 1 | 2, at: string, text: string) => {
    const payload = Buffer.from(`${at} ${text}`);
    const header = Buffer.alloc(8);
    header[0] = stream;
    header.writeUInt32BE(payload.length, 4);
    return Buffer.concat([header, payload]);
  };
  const t = (n: number) => `2026-11-27T19:00:00.${String(n).padStart(9, '0')}Z`;
  /** A frame of raw bytes after the timestamp: the engine cuts long lines at 16 KiB, inside a character if it falls there. */
  const rawFrame = (at: string, bytes: number[]) => {
    const f = Buffer.concat([Buffer.alloc(8), Buffer.from(`${at} `), Buffer.from(bytes)]);
    f[0] = 1;
    f.writeUInt32BE(f.length - 8, 4);
    return f;
  };
  // Two frames share a timestamp (a, a-err), a stderr frame is stamped before the stdout one
  // the log has before it (each stream is stamped by its own copier), and é (c3 a9) is split
  // across two frames.
  const frames = [
    frame(1, t(100), '1\n'),
    frame(1, t(200), 'a\n'),
    frame(2, t(200), 'a-err\n'),
    frame(1, t(250), 'b\n'),
    frame(2, t(240), 'b-err\n'),
    rawFrame(t(300), [...Buffer.from('caf'), 0xc3]),
    rawFrame(t(400), [0xa9, 0x0a]),
    frame(2, t(500), 'last-err\n'),
    frame(1, t(600), 'last\n'),
  ];

  /** A container whose first follow gives the first `followed` frames and ends; followed again after exit it gives every frame (`since` noted). */
  function stoppingAt(followed: number, asked: { since?: number }[]): Docker.Container {
    let calls = 0;
    return {
      logs: async (opts: { follow: boolean; since?: number }) => {
        expect(opts.follow).toBe(true);
        const s = new PassThrough();
        if (calls++ === 0) s.end(Buffer.concat(frames.slice(0, followed)));
        else {
          asked.push({ since: opts.since });
          s.end(Buffer.concat(frames));
        }
        return s;
      },
    } as unknown as Docker.Container;
  }

  for (const followed of [0, 1, 2, 3, 4, 5, 6, 7, 9]) {
    it(`ends with every frame once when the follow stopped after ${followed} of ${frames.length}`, async () => {
      const job = `job-${++seq}`;
      const asked: { since?: number }[] = [];
      const output = new ContainerOutput(stoppingAt(followed, asked), docker.modem, await logs.create(job), String);
      await output.follow();
      await output.finish();
      expect(await logged(job)).toEqual({ stdout: '1\na\nb\ncafé\nlast\n', stderr: 'a-err\nb-err\nlast-err\n' });
      // Asked from a second before the last frame followed (all of it when none was).
      expect(asked).toEqual([{ since: followed === 0 ? 0 : Date.parse('2026-11-27T19:00:00Z') / 1000 - 1 }]);
    });
  }

  it('reads the engine’s timestamps to the nanosecond, whatever their fraction’s length', () => {
    expect(timestampNs('2026-11-27T19:00:00Z')).toBe(BigInt(Date.parse('2026-11-27T19:00:00Z')) * 1_000_000n);
    expect(timestampNs('2026-11-27T19:00:00.5Z')! - timestampNs('2026-11-27T19:00:00Z')!).toBe(500_000_000n);
    expect(timestampNs('2026-11-27T19:00:00.000000001Z')! - timestampNs('2026-11-27T19:00:00Z')!).toBe(1n);
    expect(timestampNs('2026-11-27T20:00:00.000000001+01:00')).toBe(timestampNs('2026-11-27T19:00:00.000000001Z'));
    expect(timestampNs('not a time')).toBeNull();
  });
});
