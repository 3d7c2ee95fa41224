// The dev stream (GET /api/v1/dev/stream) and `dms dev watch`, against real node processes in
// dev mode: envelopes in and out of actors with how they were verified and how long replies
// took, filters, payloads only when asked for, a slow watcher that loses events without
// slowing the node, and the CLI printing it live.
import { spawn } from 'node:child_process';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { DevEvent } from '../../behaviors/dev.js';
import { DmsClient } from '../../client/index.js';
import { CLI, type NodeProcess, removeHome, startNode, TEST_ENV } from '../helpers/node.js';
import { DevEvents, waitFor } from '../helpers/network.js';

let node: NodeProcess;
let withPayloads: NodeProcess;

beforeAll(async () => {
  [node, withPayloads] = await Promise.all([
    startNode({ env: { DMS_DEBUG: 'true' } }),
    startNode({ config: { general: { debug: true, dev_payloads: true } } }),
  ]);
}, 60_000);
afterAll(async () => {
  for (const n of [node, withPayloads]) {
    await n?.stop();
    if (n) removeHome(n.home);
  }
});

const client = (n: NodeProcess) => new DmsClient({ url: n.url, timeoutMs: 20_000 });
const hello = (n: NodeProcess) => client(n).invoke({ inbox: 'root' }, '/public/hello', { greeting: 'hi' });
const envelopes = (w: DevEvents) => w.events.filter((e): e is Extract<DevEvent, { type: 'envelope' }> => e.type === 'envelope');

describe('the dev stream', () => {
  it('shows an invoke entering root, root replying, and the reply reaching the waiting REST request with its latency', async () => {
    const watch = await DevEvents.open(node.url, ['envelope']);
    try {
      const reply = await hello(node);
      const nonce = String(reply.env.nonce);
      const into = await watch.waitFor('the hello delivered to root', (e) => e.type === 'envelope' && e.direction === 'in' && e.actor === 'root' && e.behavior === '/public/hello');
      // An unsigned envelope from a local tool is signed by the node for it.
      expect(into).toMatchObject({ verified: 'node', from: { host: expect.any(String) }, to: { inbox: 'root' } });
      expect(into.type === 'envelope' && into.size).toBeGreaterThan(0);
      expect(into).not.toHaveProperty('payload');
      await watch.waitFor("root's reply going out", (e) => e.type === 'envelope' && e.direction === 'out' && e.actor === 'root' && e.nonce === nonce);
      const back = await watch.waitFor('the reply taken by the REST request', (e) => e.type === 'envelope' && e.direction === 'in' && e.nonce === nonce);
      expect(back.type === 'envelope' && back.reply_ms).toBeGreaterThanOrEqual(0);
    } finally {
      watch.close();
    }
  });

  it('filters by actor, behavior and type, and refuses an unknown type with 400 naming it', async () => {
    const res = await fetch(`${node.url}/api/v1/dev/stream?type=envelope,bogus`);
    expect(res.status).toBe(400);
    expect((await res.json()).error).toMatch(/^type\.1: Invalid option: expected one of "envelope"/);

    const onlyRoot = await DevEvents.open(node.url, ['envelope'], { actor: 'root', behavior: '/public/hello' });
    try {
      await hello(node);
      await client(node).invoke({ inbox: 'root' }, '/public/status', {});
      await hello(node);
      await waitFor('both hellos at root', () => envelopes(onlyRoot).length >= 2);
      // Replies (behavior /private/…) and the status request are left out; so are the other actors.
      for (const e of envelopes(onlyRoot)) expect(e).toMatchObject({ direction: 'in', actor: 'root', behavior: '/public/hello' });
    } finally {
      onlyRoot.close();
    }
  });

  it('shows payloads only on a node started with --dev-payloads', async () => {
    const watch = await DevEvents.open(withPayloads.url, ['envelope'], { actor: 'root' });
    try {
      await hello(withPayloads);
      const into = await watch.waitFor('the hello at root', (e) => e.type === 'envelope' && e.direction === 'in');
      expect(into).toMatchObject({ payload: { greeting: 'hi' } });
    } finally {
      watch.close();
    }
  });

  it('samples every actor\'s mailbox depth', async () => {
    const watch = await DevEvents.open(node.url, ['mailbox']);
    try {
      const sample = await watch.waitFor('a mailbox sample of root', (e) => e.type === 'mailbox' && e.actor === 'root');
      expect(sample).toMatchObject({ depth: expect.any(Number), capacity: 4096 });
    } finally {
      watch.close();
    }
  });

  it('a watcher that stops reading loses events, is told how many, and never slows the node', { timeout: 120_000 }, async () => {
    const ac = new AbortController();
    const res = await fetch(`${withPayloads.url}/api/v1/dev/stream?type=envelope&actor=root`, { signal: ac.signal });
    const reader = res.body!.getReader();
    await reader.read(); // subscribed
    // The watcher reads nothing while the node answers invokes whose payloads (shown in full on
    // this node) are more than every socket buffer between them holds.
    const c = client(withPayloads);
    const big = 'x'.repeat(64 * 1024);
    for (let round = 0; round < 20; round++) await Promise.all(Array.from({ length: 25 }, () => c.invoke({ inbox: 'root' }, '/public/hello', { big })));
    const decoder = new TextDecoder();
    let text = '';
    const dropped = await waitFor('a dropped event', async () => {
      const { value, done } = await reader.read();
      if (done) throw new Error('stream ended');
      text += decoder.decode(value, { stream: true });
      const m = /"type":"dropped","at":"[^"]+","count":(\d+)/.exec(text);
      return m ? Number(m[1]) : undefined;
    }, { timeoutMs: 60_000, intervalMs: 1 });
    expect(dropped).toBeGreaterThan(0);
    ac.abort();
    expect((await fetch(`${node.url}/health`)).status).toBe(200);
  });

  it('takes at most 16 watchers at once, answering the next 503 with Retry-After, and one again once one leaves', async () => {
    // Each watcher may hold 4 MiB the node has not yet written: their number bounds the memory.
    const open = await Promise.all(Array.from({ length: 16 }, () => DevEvents.open(node.url, ['lifecycle'])));
    try {
      const refused = await fetch(`${node.url}/api/v1/dev/stream`);
      expect(refused.status).toBe(503);
      expect(refused.headers.get('retry-after')).not.toBeNull();
      expect(((await refused.json()) as { error: string }).error).toBe('the dev stream has 16 watchers, as many as it takes; close one or retry later');
      open.pop()!.close();
      const again = await waitFor('room for a watcher', async () => {
        try {
          return await DevEvents.open(node.url, ['lifecycle']);
        } catch {
          return undefined;
        }
      });
      open.push(again);
    } finally {
      for (const w of open) w.close();
    }
  });

  it('stops building events for a watcher once it hangs up', async () => {
    const watchers = async () => {
      const text = await (await fetch(`${node.url}/metrics`)).text();
      return Number(/^dms_event_watchers (\d+)$/m.exec(text)?.[1]);
    };
    // Watchers of the tests before may take a moment to hang up.
    await waitFor('no watcher yet', async () => (await watchers()) === 0);
    const a = await DevEvents.open(node.url, ['envelope']);
    const b = await DevEvents.open(node.url, ['envelope']);
    expect(await watchers()).toBe(2);
    a.close();
    await waitFor('the first watcher gone', async () => (await watchers()) === 1);
    // The one still there goes on receiving, within the batching delay.
    await hello(node);
    await b.waitFor('a hello after the other watcher left', (e) => e.type === 'envelope' && e.behavior === '/public/hello');
    b.close();
    await waitFor('no watcher left', async () => (await watchers()) === 0);
  });
});

describe('dms dev watch', () => {
  it('prints each event as one line as it happens, filtered by actor', async () => {
    const proc = spawn(process.execPath, [CLI, '--home', node.home, 'dev', 'watch', '--actor', 'root', '--type', 'envelope'], {
      env: { ...process.env, ...TEST_ENV },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    proc.stdout.on('data', (d) => (out += d));
    try {
      // Keep saying hello until the watcher, once connected, prints one.
      const line = await waitFor('a line for the hello at root', async () => {
        await hello(node);
        return out.split('\n').find((l) => /^\d\d:\d\d:\d\d\.\d{3} root → \/public\/hello from /.test(l));
      }, { timeoutMs: 30_000, intervalMs: 200 });
      expect(line).toMatch(/\(\d+ B, node\)$/);
      expect(out.split('\n').filter(Boolean).every((l) => / root [→←] /.test(l))).toBe(true);
    } finally {
      proc.kill('SIGINT');
    }
  });
});
