import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DmsClient } from '../../client/client.js';
import { KeyPair } from '../../runtime/crypto/keys.js';
import { startCluster, stopCluster, waitFor } from '../helpers/network.js';
import { type NodeProcess, runCli } from '../helpers/node.js';

/**
 * Capabilities across two real nodes: B joins through A, and B's callers invoke A's root
 * actor over libp2p. A refuses what it has not granted with an error reply, which reaches the
 * caller long before the invoke expires; a grant on A, or a token B attaches, lets it through.
 */

let a: NodeProcess;
let b: NodeProcess;
let nodes: NodeProcess[] = [];

beforeAll(async () => {
  // B collects at most one broadcast reply: the fan-in limit.
  nodes = await startCluster(2, { node: (i) => (i === 1 ? { config: { rest: { max_broadcast_replies: 1 } } } : {}) });
  [a, b] = nodes;
  // Unsigned calls through B's REST run as B's operator; /public needs no grant.
  await waitFor('B to reach A', async () => (await callA(undefined, '/public/hello')).payload, { timeoutMs: 45_000 });
}, 120_000);
afterAll(() => stopCluster(nodes));

const TTL_MS = 20_000;
const remoteRoot = () => ({ host: a.peerId, inbox: 'root' });

/** Invokes A's root behavior through B's REST, returning error replies instead of throwing. */
function callA(key: KeyPair | undefined, be: string, ttlMs = TTL_MS) {
  return new DmsClient({ url: b.url, key, timeoutMs: ttlMs }).invoke<Record<string, unknown>>(remoteRoot(), be, {}, { raw: true, ttlMs });
}

describe('a remote node', () => {
  // The test's timeout lies beyond the long TTL, so a call that waited for it fails on the bound.
  it("answers a call it does not allow with an error reply, long before the call's expiry", { timeout: 150_000 }, async () => {
    const bOperator = b.operator().did;
    const LONG_TTL_MS = 60_000;
    for (const key of [undefined, KeyPair.generate()]) {
      const t0 = Date.now();
      const reply = await callA(key, '/dms/node/peers/list', LONG_TTL_MS);
      expect(Date.now() - t0).toBeLessThan(LONG_TTL_MS / 3);
      expect(reply.error).toBe(`capability /dms/node/peers/list not granted to ${key?.did ?? bOperator}`);
      expect(reply.env.from.addr.host).toBe(a.peerId);
    }
    // The CLI reports it in one line.
    const cli = await runCli(['--home', b.home, 'actor', 'invoke', '/dms/node/peers/list', '--host', a.peerId, '--timeout', '20']);
    expect(cli.code).not.toBe(0);
    expect(cli.stderr.trim()).toBe(`dms: /dms/node/peers/list answered with an error: capability /dms/node/peers/list not granted to ${bOperator}`);
  });

  it("lets the call through once A's operator grants it", async () => {
    const bOperator = b.operator().did;
    const grant = await runCli(['--home', a.home, 'cap', 'grant', bOperator, '--cap', '/dms/node/peers/list', '--expiry', '1h']);
    expect(grant.code, grant.stderr).toBe(0);
    const peers = await waitFor('the grant to take effect on A', async () => {
      const r = await callA(undefined, '/dms/node/peers/list');
      return r.error === undefined && (r.payload.peers as string[]);
    });
    expect(peers).toContain(b.peerId);
  });

  it('accepts a token B attaches from its provide anchors', async () => {
    const bOperator = b.operator().did;
    expect((await callA(undefined, '/dms/node/peers/self')).error).toMatch(/capability \/dms\/node\/peers\/self not granted/);
    const made = await runCli(['--home', a.home, 'cap', 'new', bOperator, '--cap', '/dms/node/peers/self', '--expiry', '1h']);
    expect(made.code, made.stderr).toBe(0);
    const anchored = await runCli(['--home', b.home, 'cap', 'anchor', '--provide', made.stdout.trim()]);
    expect(anchored.code, anchored.stderr).toBe(0);
    const self = await waitFor('B to attach the provide token', async () => {
      const r = await callA(undefined, '/dms/node/peers/self');
      return r.error === undefined && r.payload;
    });
    expect(self.id).toBe(a.peerId);
    // The CLI attaches the home's provide tokens to what it signs itself.
    const cli = await runCli(['--home', b.home, 'actor', 'invoke', '/dms/node/peers/self', '--host', a.peerId]);
    expect(cli.code, cli.stderr).toBe(0);
    expect(JSON.parse(cli.stdout).id).toBe(a.peerId);
  });
});

describe('broadcast fan-in', () => {
  it('collects no more replies than rest.max_broadcast_replies', { timeout: 120_000 }, async () => {
    const all = await waitFor('both nodes to answer a hello broadcast on A', async () => {
      const replies = await new DmsClient({ url: a.url }).broadcast('/dms/hello', '/broadcast/hello', {}, { ttlMs: 3_000 });
      return replies.length === 2 && replies;
    });
    expect(all.map((r) => r.env.from.addr.host).sort()).toEqual([a.peerId, b.peerId].sort());
    const TTL_MS_LONG = 60_000;
    const t0 = Date.now();
    const capped = await new DmsClient({ url: b.url, timeoutMs: TTL_MS_LONG }).broadcast('/dms/hello', '/broadcast/hello', {}, { ttlMs: TTL_MS_LONG });
    expect(capped).toHaveLength(1);
    // Full at one reply: it returns then, not at the broadcast's expiry (the margin is for a loaded machine).
    expect(Date.now() - t0).toBeLessThan(TTL_MS_LONG / 3);
  });
});
