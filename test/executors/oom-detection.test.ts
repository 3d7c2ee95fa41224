// The OOM verdict of a SIGKILLed, memory-limited container, against a stand-in engine: the engine
// may never set State.OOMKilled when its OOM event lands after the exit, but it still publishes
// the container's `oom` event, and either sign names the death an OOM.
import { PassThrough } from 'node:stream';
import type Docker from 'dockerode';
import { describe, expect, it } from 'vitest';
import { inspectAfterExit } from '../../actors/executors/docker.js';

function engine(opts: { flagAfter?: number; events?: string; queryMs?: number; queries?: { until: number }[] }) {
  let inspections = 0;
  const info = () => ({
    HostConfig: { Memory: 16 * 1024 * 1024 },
    State: { OOMKilled: opts.flagAfter !== undefined && inspections > opts.flagAfter, ExitCode: 137, StartedAt: new Date().toISOString() },
  });
  const container = { id: 'c1', inspect: async () => (inspections++, info()) } as unknown as Docker.Container;
  const docker = {
    getEvents: async (q: { until: number }) => {
      opts.queries?.push(q);
      if (opts.queryMs) await new Promise((r) => setTimeout(r, opts.queryMs));
      const s = new PassThrough();
      s.end(opts.events ?? '');
      return s;
    },
  } as unknown as Docker;
  return { docker, container, inspections: () => inspections };
}

describe('OOM detection after a SIGKILL', () => {
  it('takes the engine oom event when State.OOMKilled never comes', async () => {
    const e = engine({ events: '{"status":"oom","id":"c1"}\n' });
    expect((await inspectAfterExit(e.docker, e.container, 137)).State.OOMKilled).toBe(true);
  });

  it('takes State.OOMKilled when it settles later', async () => {
    const e = engine({ flagAfter: 2 });
    expect((await inspectAfterExit(e.docker, e.container, 137)).State.OOMKilled).toBe(true);
  });

  it('gives up at its deadline by the clock, however slow each query is, and never asks past the current second', async () => {
    const queries: { until: number }[] = [];
    const e = engine({ queryMs: 150, queries });
    expect((await inspectAfterExit(e.docker, e.container, 137, 400)).State.OOMKilled).toBe(false);
    // Each try takes at least 400 ms (query and pause): a deadline of 400 ms allows two at most,
    // and a slower machine fewer, where a count of tries would have taken ever longer.
    expect(queries.length).toBeGreaterThan(0);
    expect(queries.length).toBeLessThanOrEqual(2);
    for (const q of queries) expect(q.until).toBeLessThanOrEqual(Math.floor(Date.now() / 1000));
  });

  it('does not wait for a container that exited by itself', async () => {
    const e = engine({});
    expect((await inspectAfterExit(e.docker, e.container, 1)).State.OOMKilled).toBe(false);
    expect(e.inspections()).toBe(1);
  });
});
