/**
 * One peer flooding a behavior that is slow (an operator's plugin that waits on an outside
 * service, open to everyone) must not shut every other caller out of that actor. First come
 * first served, the flooder's envelopes filled the actor's mailbox (4,096) at the node's intake
 * rate while the behavior took 128 a second, and every other caller was refused ("mailbox of
 * actor open-slow is full") until it drained. Now a mailbox takes its senders in turns and one
 * sender may hold a quarter of it (runtime/mailbox.ts).
 */
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { decodePayload } from '../../runtime/wire/envelope.js';
import { stopCluster, waitFor } from '../helpers/network.js';
import { type NodeProcess, startNode } from '../helpers/node.js';
import { ForeignPeer } from '../helpers/peer.js';

const plugin = fileURLToPath(new URL('../fixtures/plugins/open-slow.mjs', import.meta.url));
const BE = '/public/open-slow/wait';
/** Each call waits this long: 64 at once, the actor takes 128 a second. */
const WAIT_MS = 500;
/** Past a sender's share (1,024), and enough to wait many seconds behind first come first served. */
const FLOOD = 2_000;

let node: NodeProcess;
const peers: ForeignPeer[] = [];

beforeAll(async () => {
  node = await startNode({ config: { plugins: { modules: [plugin] } } });
}, 60_000);
afterAll(async () => {
  await Promise.all(peers.map((p) => p.stop()));
  // Stopped gracefully, the node would first serve what is left of the flood (seconds of it).
  await node?.kill();
  await stopCluster([node].filter(Boolean));
});

/** What the reply at `be` said: the call's answer, or the refusal's text. */
const said = (peer: ForeignPeer, be: string) => {
  const reply = peer.replies(be)[0];
  if (!reply) return undefined;
  const p = decodePayload(reply.msg) as { waited_ms?: number; error?: string };
  return p.waited_ms !== undefined ? `waited ${p.waited_ms} ms` : `refused: ${p.error}`;
};

describe('a peer flooding a slow behavior', () => {
  it('fills only its share of the actor’s mailbox: another peer is served meanwhile', { timeout: 90_000 }, async () => {
    const hostile = await ForeignPeer.connectedTo(node);
    peers.push(hostile);
    for (let i = 0; i < FLOOD; i++) await hostile.send(hostile.envelope(node, { inbox: 'open-slow', be: BE, cont: `/private/flood-${i}`, payload: { ms: WAIT_MS }, ttlMs: 60_000 }));
    // Another peer's calls, while the flood still waits: each answered, in about the call's own time.
    const honest = await ForeignPeer.connectedTo(node);
    peers.push(honest);
    const answers: string[] = [];
    for (let i = 0; i < 3; i++) {
      const started = Date.now();
      await honest.send(honest.envelope(node, { inbox: 'open-slow', be: BE, cont: `/private/honest-${i}`, payload: { ms: WAIT_MS }, ttlMs: 20_000 }));
      const answer = await waitFor(`the answer to honest call ${i}`, () => said(honest, `/private/honest-${i}`), { timeoutMs: 15_000, intervalMs: 10 });
      answers.push(`${answer} in ${Date.now() - started} ms`);
    }
    const metrics = await (await fetch(`${node.url}/metrics`)).text();
    const depth = Number(/dms_mailbox_depth\{actor="open-slow"\} (\d+)/.exec(metrics)?.[1]);
    // The flood still waits behind them: the honest calls went in turns, not behind it.
    expect(depth, `the flood still waiting when the honest calls were done (${answers.join('; ')})`).toBeGreaterThan(64);
    expect(answers.every((a) => a.startsWith(`waited ${WAIT_MS} ms`)), answers.join('; ')).toBe(true);
    // In turns, a call waits for the next free slot (every few ms), then its own 500 ms; first
    // come first served it waited behind what was left of the flood (seconds), or was refused.
    for (const a of answers) expect(Number(/in (\d+) ms/.exec(a)![1]), answers.join('; ')).toBeLessThan(3_000);
    // Past its share: the flooder's own envelopes are refused.
    const refusal = await waitFor('a refusal of the flood past its share', () => hostile.arrived.filter((e) => e.be.startsWith('/private/flood-')).map((e) => said(hostile, e.be)).find((s) => s?.startsWith('refused')), { timeoutMs: 10_000 });
    expect(refusal).toBe('refused: mailbox of actor open-slow holds 1024 envelopes from this sender, the most one sender may of its 4096; retry later');
  });
});
