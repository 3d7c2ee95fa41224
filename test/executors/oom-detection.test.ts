// The OOM verdict of a SIGKILLed, memory-limited container, against a stand-in engine: the engine
// may never set State.OOMKilled when its OOM event lands after the exit, but it still publishes
// the container's `oom` event, and either sign names the death an OOM. The events come from one
// live subscription per executor; a container that died where it did not watch is looked up in
// the engine's history instead.
import { PassThrough } from 'node:stream';
import { setTimeout as sleep } from 'node:timers/promises';
import type Docker from 'dockerode';
import { afterEach, describe, expect, it } from 'vitest';
import { OomEvents, oomVerdict } from '../../actors/executors/oom-events.js';

interface Query {
  since?: number;
  until?: number;
  filters: Record<string, string[]>;
}

function engine(opts: { flagAfter?: number; startedAt?: () => number; history?: string; queryMs?: number } = {}) {
  let inspections = 0;
  /** One-off history queries (they have an `until`). */
  const queries: Query[] = [];
  /** Live subscriptions, each with the stream the stand-in feeds. */
  const subscriptions: { query: Query; stream: PassThrough }[] = [];
  const info = () => ({
    HostConfig: { Memory: 16 * 1024 * 1024 },
    State: {
      OOMKilled: opts.flagAfter !== undefined && inspections > opts.flagAfter,
      ExitCode: 137,
      StartedAt: new Date(opts.startedAt?.() ?? Date.now()).toISOString(),
    },
  });
  const container = { id: 'c1', inspect: async () => (inspections++, info()) } as unknown as Docker.Container;
  const docker = {
    getEvents: async (q: Query) => {
      const s = new PassThrough();
      if (q.until === undefined) {
        subscriptions.push({ query: q, stream: s });
        return s;
      }
      queries.push(q);
      if (opts.queryMs) await sleep(opts.queryMs);
      s.end(opts.history ?? '');
      return s;
    },
  } as unknown as Docker;
  return { docker, container, inspections: () => inspections, queries, subscriptions };
}

const oomLine = (id: string) => `${JSON.stringify({ status: 'oom', id, Type: 'container', Action: 'oom', Actor: { ID: id } })}\n`;

const opened: OomEvents[] = [];
async function watch(docker: Docker): Promise<OomEvents> {
  const events = new OomEvents(docker, 'dms.node=peer-x');
  opened.push(events);
  await events.open();
  return events;
}
afterEach(() => opened.splice(0).forEach((e) => e.close()));

describe('OOM detection after a SIGKILL', () => {
  it('takes the live oom event when State.OOMKilled never comes, without asking the history', async () => {
    const e = engine();
    const events = await watch(e.docker);
    const verdict = oomVerdict(e.container, 137, events);
    // The event lands after the exit, as under load.
    await sleep(100);
    e.subscriptions[0].stream.write(oomLine('c1'));
    expect((await verdict).State.OOMKilled).toBe(true);
    expect(e.queries).toEqual([]);
  });

  it('takes State.OOMKilled when it settles later', async () => {
    const e = engine({ flagAfter: 2 });
    const events = await watch(e.docker);
    expect((await oomVerdict(e.container, 137, events)).State.OOMKilled).toBe(true);
  });

  it('gives up at its deadline by the clock, however slow each query is, and never asks past the current second', async () => {
    // No subscription watched this container: its history is asked instead.
    const e = engine({ queryMs: 150 });
    const events = new OomEvents(e.docker, 'dms.node=peer-x');
    const began = Date.now();
    expect((await oomVerdict(e.container, 137, events, 400)).State.OOMKilled).toBe(false);
    // One query before the wait and one after it, whatever the pace: never a query per try.
    expect(Date.now() - began).toBeLessThan(2_000);
    expect(e.queries.length).toBeGreaterThan(0);
    expect(e.queries.length).toBeLessThanOrEqual(2);
    for (const q of e.queries) expect(q.until).toBeLessThanOrEqual(Math.floor(Date.now() / 1000));
  });

  it("looks up a container that died while the node was down in the engine's history, once", async () => {
    // One start time for the engine and the expectation: read twice, it crossed a second's edge in CI.
    const started = Date.now() - 3_600_000;
    const e = engine({ startedAt: () => started, history: oomLine('c1') });
    const events = await watch(e.docker);
    expect((await oomVerdict(e.container, 137, events)).State.OOMKilled).toBe(true);
    expect(e.queries).toHaveLength(1);
    expect(e.queries[0]).toMatchObject({ since: Math.floor(started / 1000), filters: { container: ['c1'], event: ['oom'] } });
    expect(e.queries[0].until).toBeLessThanOrEqual(Math.floor(Date.now() / 1000));
  });

  it('does not wait for a container that exited by itself', async () => {
    const e = engine();
    expect((await oomVerdict(e.container, 1, await watch(e.docker))).State.OOMKilled).toBe(false);
    expect(e.inspections()).toBe(1);
  });
});

describe('the engine event subscription', () => {
  it("follows only this node's container oom events, and after an error resumes from where it broke", async () => {
    const e = engine();
    const events = await watch(e.docker);
    expect(e.subscriptions).toHaveLength(1);
    // (and the signal that gives up an engine that does not answer)
    expect(e.subscriptions[0].query).toMatchObject({ filters: { type: ['container'], event: ['oom'], label: ['dms.node=peer-x'] } });
    e.subscriptions[0].stream.write(oomLine('c0'));
    await sleep(10);
    expect(events.seen('c0')).toBe(true);

    const broke = Math.floor(Date.now() / 1000);
    e.subscriptions[0].stream.destroy(new Error('socket hang up'));
    await sleep(10);
    expect(events.covers(Date.now() - 60_000)).toBe(false);
    // Reconnected, asking for what happened since it broke.
    await until(() => e.subscriptions.length === 2);
    expect(e.subscriptions[1].query.since).toBeLessThanOrEqual(broke);
    expect(e.subscriptions[1].query.since).toBeGreaterThanOrEqual(broke - 2);
    e.subscriptions[1].stream.write(oomLine('c2'));
    await sleep(10);
    expect(events.seen('c2')).toBe(true);

    events.close();
    expect(e.subscriptions[1].stream.destroyed).toBe(true);
    await sleep(1_500);
    expect(e.subscriptions).toHaveLength(2);
  });
});

async function until(probe: () => boolean, ms = 5_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!probe()) {
    if (Date.now() > deadline) throw new Error('timed out');
    await sleep(20);
  }
}
