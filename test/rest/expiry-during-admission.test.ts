/**
 * A REST invoke whose expiry passes while the node is still admitting it. The reply waiter is set
 * before the envelope enters the node, and entering waits for its signature check, behind every
 * other check of a burst; when the expiry came first, the waiter's rejection had nobody awaiting
 * it yet, and the node stopped on the unhandled rejection ("no reply before opt.exp"). Found by a
 * CI run of test/rest/metrics.test.ts's burst under load; here any client's burst of short-lived
 * invokes did it within a few hundred ms. Against a real node process, since what failed was
 * the process.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { newCaller, wire } from '../helpers/envelopes.js';
import { type NodeProcess, removeHome, startNode } from '../helpers/node.js';
import { pipelined } from '../helpers/raw-http.js';

let node: NodeProcess;
beforeAll(async () => {
  node = await startNode();
}, 30_000);
afterAll(async () => {
  await node?.stop();
  if (node) removeHome(node.home);
});

describe('a burst of invokes whose expiry passes while they are admitted', () => {
  it('is answered, each invoke with its reply or its refusal, and the node stays up', { timeout: 60_000 }, async () => {
    const callers = Array.from({ length: 30 }, () => newCaller());
    const root = { id: '', did: '', addr: { host: node.peerId, inbox: 'root' } };
    // From ample to less than the burst's own admission takes: some expire before they are
    // checked (400), some while they wait for their reply (408), some are answered.
    for (const ttlMs of [400, 200, 100, 50]) {
      const bodies = Array.from({ length: 1200 }, (_, i) => wire(callers[i % 30]!, { to: root, be: '/public/hello', cont: `/private/burst/${i}`, ttlMs }));
      // 30 connections, 8 on the way on each: as many at once as a connection has handled (http/connection-turns.ts).
      const answers = await Promise.all(Array.from({ length: 30 }, (_, c) => pipelined(node.url, '/api/v1/actor/invoke', bodies.filter((_, i) => i % 30 === c), 8))).catch(async (e: Error) => {
        // A connection reset by a node going down: its last words say why.
        const exited = await Promise.race([new Promise<boolean>((r) => node.proc.once('exit', () => r(true))), sleep(2_000).then(() => node.proc.exitCode !== null)]);
        throw new Error(`ttl ${ttlMs} ms: ${e.message}; the node ${exited ? `exited (${node.proc.exitCode})` : 'runs'}:\n${node.logs().slice(-2000)}`);
      });
      const statuses = new Set(answers.flat().map((a) => a.status));
      expect([...statuses].filter((s) => ![200, 400, 408].includes(s)), `ttl ${ttlMs} ms`).toEqual([]);
    }
    expect((await fetch(`${node.url}/health`)).status).toBe(200);
  });
});
