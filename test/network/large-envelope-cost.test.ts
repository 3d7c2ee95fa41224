import { randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type NodeProcess, startNode } from '../helpers/node.js';
import { type ForeignPeer, type StrangerAtNodeScene, strangerBesideANode } from '../helpers/peer.js';

/**
 * What an envelope as large as `network.MaxEnvelopeBytes` allows (1 MiB) costs the node that
 * reads it, against a real node process: its JSON is read before anything else about it is
 * checked, from any peer. Read a character at a time (lossless-json, for the u64 fields), one
 * took about 300 ms of the node's event loop, so a peer sending three a second stopped the node
 * (its REST, its other peers, its jobs) for as long as it liked. Now its long strings (`msg`)
 * are read natively, and their base64 checked without a backtracking regex. Measured in CPU time
 * of the node's process (user and system, from /proc), which a busy machine stretches less than
 * the wall clock: sixteen such envelopes cost it about 3.7 s before, about 0.8 s now (decryption, copies and GC).
 */

/** CPU time the process has used, in ms (Linux: /proc/<pid>/stat, fields utime and stime in clock ticks of 10 ms). */
function cpuMs(pid: number): number {
  const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ');
  return (Number(fields[11]) + Number(fields[12])) * 10;
}

let scene: StrangerAtNodeScene | undefined;
let node: NodeProcess;
let peer: ForeignPeer;

beforeAll(async () => void ({ node, peer } = scene = await strangerBesideANode(() => startNode({ timeoutMs: 45_000 }))), 60_000);
afterAll(() => scene?.stop());

describe('an envelope of 1 MiB from a peer', () => {
  it('costs the node tens of milliseconds of CPU, not hundreds: sixteen of them, then a hello, answered', { timeout: 30_000 }, async () => {
    // Signed, well formed, for a behavior nobody has: each is read whole, and dropped.
    const big = Array.from({ length: 16 }, () => peer.envelope(node, { be: '/public/nothing-here', payload: { pad: 'x'.repeat(700_000) } }));
    const cont = `/private/r/${randomUUID()}`;
    const hello = peer.envelope(node, { be: '/public/hello', cont });
    const before = cpuMs(node.pid);
    for (const env of big) await peer.send(env);
    await peer.send(hello);
    const reply = await peer.waitReply(cont, 20_000);
    const spent = cpuMs(node.pid) - before;
    expect(reply.from.addr.host).toBe(node.peerId);
    expect(spent, `${spent} ms of CPU for sixteen envelopes of 1 MiB`).toBeLessThan(1_600);
    // The node's REST answers at once.
    const began = Date.now();
    expect((await fetch(`${node.url}/health`)).status).toBe(200);
    expect(Date.now() - began).toBeLessThan(500);
  });
});
