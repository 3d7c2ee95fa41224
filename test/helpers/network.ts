import { readFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import type { DevEvent, DevEventType } from '../../behaviors/dev.js';
import { settledWithin } from '../../runtime/deadline.js';
import { errorText } from '../../runtime/errors.js';
import { type NodeProcess, removeHome, type StartOptions, startNode, type TestNode } from './node.js';

/**
 * Helpers for tests that run several real node processes on loopback: start a small network
 * bootstrapped to its first node, poll for conditions instead of sleeping, and watch a node's
 * dev event stream.
 */

/** The first listen multiaddr a running node recorded in its node.json (ends in /p2p/<id>). */
export function listenAddr(node: Pick<NodeProcess, 'home'>): string {
  const info = JSON.parse(readFileSync(join(node.home, 'node.json'), 'utf8')) as { addrs?: string[] };
  const addr = info.addrs?.[0];
  if (!addr) throw new Error(`node at ${node.home} recorded no listen address`);
  return addr;
}

/** A TCP port free right now on 127.0.0.1, for a node that must come back on the same address. */
export async function freePort(): Promise<number> {
  // Below the kernel's ephemeral range (32768 and up here), which every port-0 listener and
  // every outgoing connection of the other test workers draws from: a port found free there
  // and bound a moment later was often taken meanwhile (EADDRINUSE). Out here only another
  // freePort could pick it, by chance.
  for (let tries = 0; ; tries++) {
    const port = 20_000 + Math.floor(Math.random() * 12_000);
    const server = createServer();
    const bound = await new Promise<boolean>((resolve) => {
      server.once('error', () => resolve(false));
      server.listen(port, '127.0.0.1', () => resolve(true));
    });
    if (bound) {
      await new Promise<void>((resolve) => server.close(() => resolve()));
      return port;
    }
    if (tries >= 50) throw new Error('no free port found below the ephemeral range');
  }
}

export interface ClusterOptions<N extends TestNode = NodeProcess> {
  /** How each node starts: startNode (a process, the default) or startLocalNode (in this process). */
  start?: (opts: StartOptions) => Promise<N>;
  /** Extra start options for node i (0-based), merged over the cluster's own. */
  node?: (i: number) => StartOptions;
  /** Environment for every node. */
  env?: Record<string, string>;
}

/**
 * Starts `n` nodes: the first alone, the others together, bootstrapped to the first through
 * DMS_NETWORK_BOOTSTRAP_PEERS (the way an operator would join a network).
 */
export async function startCluster<N extends TestNode = NodeProcess>(n: number, opts: ClusterOptions<N> = {}): Promise<N[]> {
  const start = opts.start ?? (startNode as unknown as (o: StartOptions) => Promise<N>);
  const options = (i: number, extraEnv: Record<string, string> = {}): StartOptions => {
    const own = opts.node?.(i) ?? {};
    return { timeoutMs: 45_000, ...own, env: { ...opts.env, ...extraEnv, ...own.env } };
  };
  const first = await start(options(0));
  const started: N[] = [first];
  try {
    const bootstrap = { DMS_NETWORK_BOOTSTRAP_PEERS: listenAddr(first) };
    const rest = await Promise.allSettled(Array.from({ length: n - 1 }, (_, i) => start(options(i + 1, bootstrap))));
    for (const r of rest) if (r.status === 'fulfilled') started.push(r.value);
    const failed = rest.find((r) => r.status === 'rejected');
    if (failed) throw (failed as PromiseRejectedResult).reason;
    return started;
  } catch (e) {
    await stopCluster(started);
    throw e;
  }
}

/** Stops every node still running and removes their homes. */
export async function stopCluster(nodes: (TestNode | undefined)[]): Promise<void> {
  await Promise.all(nodes.map((n) => n?.stop()));
  for (const n of nodes) if (n) removeHome(n.home);
}

export interface PollOptions {
  timeoutMs?: number;
  intervalMs?: number;
  /** What the timeout message adds after the last answer: the state that explains the wait (see jobOnNodes). */
  explain?: () => Promise<string> | string;
}

/**
 * Default bound of a wait: shorter than vitest's testTimeout (30 s), so a wait that runs out
 * fails with its own message (what it waited for, the last answer) rather than a bare timeout.
 */
export const WAIT_MS = 20_000;

/**
 * Calls `check` until it returns a value other than undefined/false, and returns that value.
 * A throw counts as "not yet"; the last reason is in the timeout error, so a failure says why.
 * The one poller of the suite: tests wait with it, never with a loop of their own.
 */
export async function waitFor<T>(what: string, check: () => Promise<T | undefined | false> | T | undefined | false, opts: PollOptions = {}): Promise<T> {
  const deadline = Date.now() + (opts.timeoutMs ?? WAIT_MS);
  let last = 'never checked';
  for (;;) {
    try {
      const value = await check();
      if (value !== undefined && value !== false) return value;
      last = `got ${String(value)}`;
    } catch (e) {
      last = errorText(e);
    }
    if (Date.now() > deadline) {
      const why = opts.explain ? await Promise.resolve().then(opts.explain).catch((e: unknown) => `(could not explain: ${errorText(e)})`) : '';
      throw new Error(`timed out waiting for ${what} (last: ${last})${why ? `\n${why}` : ''}`);
    }
    await sleep(opts.intervalMs ?? 200);
  }
}

/**
 * `p`'s value, or a rejection naming `what` once `ms` passed without it: for one operation that
 * must end in time (a fetch), where waitFor polls a state.
 */
export function within<T>(ms: number, what: string, p: Promise<T>): Promise<T> {
  // The bound holds the process, as the timer it replaces did: a hung operation fails the test by name.
  return settledWithin(
    p,
    ms,
    () => {
      throw new Error(`${what}: not done within ${ms} ms`);
    },
    { unref: false },
  );
}

/** Of a job's record, what says where it is and why. */
type JobState = { status: string; node: string | null; pending_reason: string | null; error: string | null; attempts: unknown[]; updated_at: string };

/**
 * What each node knows of job `id`, for a wait's timeout message: its record (status, node,
 * pending reason, error, attempts), its stored history (GET /api/v1/jobs/{id}/events), and the
 * end of the node's log. Never throws: what could not be read says so in its place.
 */
export async function jobOnNodes(nodes: TestNode[], id: string): Promise<string> {
  const read = async (url: string): Promise<unknown> => {
    const res = await fetch(url, { signal: AbortSignal.timeout(5_000) });
    return res.ok ? res.json() : `HTTP ${res.status} ${(await res.text()).slice(0, 200)}`;
  };
  const parts = await Promise.all(
    nodes.map(async (n, i) => {
      const [job, events] = await Promise.all([`${n.url}/api/v1/jobs/${id}`, `${n.url}/api/v1/jobs/${id}/events`].map((u) => read(u).catch((e: unknown) => errorText(e))));
      const lines = [`node ${i + 1} (${n.peerId}) at ${new Date().toISOString()}:`];
      if (typeof job === 'string') lines.push(`  job: ${job}`);
      else {
        const { status, node, pending_reason, error, attempts, updated_at } = job as JobState;
        lines.push(`  job: ${JSON.stringify({ status, node, pending_reason, error, attempts, updated_at })}`);
      }
      if (typeof events === 'string') lines.push(`  events: ${events}`);
      else for (const e of (events as { events: { at: string; from: string | null; to: string; reason: string }[] }).events.slice(-30)) lines.push(`  ${e.at} ${e.from ?? '-'} -> ${e.to}: ${e.reason}`);
      const log = n.logs().trimEnd();
      lines.push(log ? `  log (end): ${log.slice(-2_000).split('\n').join('\n    ')}` : '  log: empty');
      return lines.join('\n');
    }),
  );
  return parts.join('\n');
}

/** The nonce of a dev stream event about an envelope (delivered, sent or dead), as a string. */
export const nonceOf = (e: DevEvent): string | undefined => ('nonce' in e ? e.nonce : undefined);

/**
 * Follows a dev-mode node's dev stream and keeps every event, so a test can wait for
 * proof that something happened (a delivery, a dead letter) rather than for time to pass.
 */
export class DevEvents {
  readonly events: DevEvent[] = [];
  private readonly abort = new AbortController();

  private constructor() {}

  /** Resolves once the node has the subscription open, so no later event is missed. */
  static async open(url: string, types: DevEventType[], filters: { actor?: string; behavior?: string } = {}): Promise<DevEvents> {
    const watch = new DevEvents();
    const query = new URLSearchParams({ type: types.join(','), ...filters });
    const res = await fetch(`${url}/api/v1/dev/stream?${query}`, { signal: watch.abort.signal });
    if (res.status !== 200 || !res.body) throw new Error(`dev stream: HTTP ${res.status} ${await res.text()}`);
    const reader = res.body.getReader();
    // The node writes a comment as soon as it has subscribed; events published after it reach us.
    const first = await reader.read();
    if (first.done) throw new Error('dev stream: closed at once');
    void watch.pump(reader, new TextDecoder().decode(first.value));
    return watch;
  }

  private async pump(reader: ReadableStreamDefaultReader<Uint8Array>, initial: string): Promise<void> {
    const decoder = new TextDecoder();
    let buffer = initial;
    try {
      for (;;) {
        let end: number;
        while ((end = buffer.indexOf('\n\n')) >= 0) {
          const block = buffer.slice(0, end);
          buffer = buffer.slice(end + 2);
          const data = block
            .split('\n')
            .filter((l) => l.startsWith('data:'))
            .map((l) => l.slice(5).trimStart())
            .join('\n');
          if (data) this.events.push(JSON.parse(data) as DevEvent);
        }
        const { value, done } = await reader.read();
        if (done) return;
        buffer += decoder.decode(value, { stream: true });
      }
    } catch {
      // Closed by close() or by the node going away: the events so far stay readable.
    }
  }

  find(pred: (e: DevEvent) => boolean): DevEvent | undefined {
    return this.events.find(pred);
  }

  waitFor(what: string, pred: (e: DevEvent) => boolean, timeoutMs = WAIT_MS): Promise<DevEvent> {
    return waitFor(what, () => this.find(pred), { timeoutMs, intervalMs: 50 });
  }

  close(): void {
    this.abort.abort();
  }
}
