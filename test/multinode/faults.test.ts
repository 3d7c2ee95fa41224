import { copyFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DmsClient } from '../../client/client.js';
import { verifyEnvelope } from '../../runtime/crypto/signing.js';
import { msToNs, nowNs } from '../../runtime/time.js';
import { encodeEnvelope, parseEnvelope } from '../../runtime/wire/envelope.js';
import { type Caller, envelope, newCaller, post, rootOf } from '../helpers/envelopes.js';
import { DevEvents, nonceOf, listenAddr, startCluster, stopCluster, waitFor } from '../helpers/network.js';
import { type NodeProcess, startNode, tempHome } from '../helpers/node.js';

// Three nodes; node 3 carries the slow test plugin (a behavior that answers late, so a
// request can be in flight when its node dies), and node 1 listens on a fixed port so it can
// come back at the address the others bootstrapped to.
let nodes: NodeProcess[] = [];
let n1: NodeProcess;
let n2: NodeProcess;
let n3: NodeProcess;
let n1Listen: string;

beforeAll(async () => {
  const home3 = tempHome();
  copyFileSync(new URL('../fixtures/plugins/slow.mjs', import.meta.url), join(home3, 'slow.mjs'));
  nodes = await startCluster(3, {
    env: { DMS_DEBUG: 'true' },
    node: (i) =>
      i === 2 ? { home: home3, config: { plugins: { modules: ['./slow.mjs'] } } } : {},
  });
  [n1, n2, n3] = nodes;
  // Node 1 comes back on the address it took (port 0): the others know it by that one.
  n1Listen = listenAddr(n1).replace(/\/p2p\/.*$/, '');
});
afterAll(() => stopCluster(nodes));

const invokeUrl = () => `${n1.url}/api/v1/actor/invoke`;
const peersOf = async (node: NodeProcess) => new DmsClient({ url: node.url, timeoutMs: 5_000 }).peers();

/** A REST invoke on node 1 of `be` at `inbox` on `host`, expiring in `ttlMs`. */
function request(caller: Caller, host: string, be: string, ttlMs: number, inbox = 'root', payload: unknown = {}) {
  const to = { ...rootOf(host), addr: { host, inbox } };
  const exp = nowNs() + msToNs(ttlMs);
  const env = envelope(caller, { to, be, payload, exp, cont: '/private/reply/fault', host: n1.peerId });
  return { env, expMs: Number(exp / 1_000_000n) };
}

/** Restarts a node from its home (same key, so the same peer id), bootstrapped to node 1. */
async function restart(old: NodeProcess, env: Record<string, string> = {}): Promise<NodeProcess> {
  const node = await startNode({ home: old.home, timeoutMs: 45_000, env: { DMS_DEBUG: 'true', ...env } });
  nodes[nodes.indexOf(old)] = node;
  expect(node.peerId).toBe(old.peerId);
  return node;
}

// Restarts and expiries add up to tens of seconds on a loaded machine; the waits inside are bounded.
describe('faults', { timeout: 90_000 }, () => {
  it('a peer that dies mid-invoke: the waiting REST call ends at opt.exp with 408, and its reply slot is freed', async () => {
    await waitFor('node 1 to be connected to node 3', async () => (await peersOf(n1)).includes(n3.peerId));
    // Signed by node 3's operator, whom node 3 trusts to run its non-public behaviors.
    const caller: Caller = { key: n3.operator(), inbox: newCaller().inbox };
    const { env, expMs } = request(caller, n3.peerId, '/plugin/slow/wait', 6_000, 'slow', { ms: 60_000 });
    const watch = await DevEvents.open(n3.url, ['envelope']);
    const pending = post(invokeUrl(), encodeEnvelope(env));
    try {
      await watch.waitFor('the invoke to reach node 3', (e) => nonceOf(e) === String(env.nonce));
    } finally {
      watch.close();
    }
    await n3.kill();
    const res = await pending;
    const ended = Date.now();
    expect(res.status, res.text).toBe(408);
    expect(res.json.error).toMatch(/no reply before opt\.exp/);
    // Not before the expiry, and not long after it: the request never hangs (the behavior
    // would answer 60 s in; the margin past the expiry is for a loaded machine).
    expect(ended).toBeGreaterThanOrEqual(expMs - 50);
    expect(ended - expMs).toBeLessThan(15_000);
    // The same inbox and reply behavior are free again: node 1 let go of the pending reply.
    const retry = envelope(caller, { to: rootOf(n2.peerId), be: '/public/hello', cont: '/private/reply/fault', host: n1.peerId, ttlMs: 10_000 });
    const ok = await post(invokeUrl(), encodeEnvelope(retry));
    expect(ok.status, ok.text).toBe(200);
    expect(parseEnvelope(ok.text).from.did).toBe(n2.did);
  });

  it('an invoke to a node killed with -9 ends by its expiry with 408 or 500 and an error body', async () => {
    expect(n3.proc.exitCode ?? n3.proc.signalCode).toBeTruthy();
    const { env, expMs } = request(newCaller(), n3.peerId, '/public/hello', 4_000);
    const res = await post(invokeUrl(), encodeEnvelope(env));
    expect([408, 500], res.text).toContain(res.status);
    expect(typeof res.json.error).toBe('string');
    expect(res.json.error).toContain(res.status === 408 ? 'no reply before opt.exp' : n3.peerId);
    // Ends by its expiry, not hanging on the dead peer: the margin is for a loaded machine.
    expect(Date.now() - expMs).toBeLessThan(15_000);
    // Node 1 notices the loss: node 3 drops off its peer list.
    await waitFor('node 1 to drop node 3', async () => !(await peersOf(n1)).includes(n3.peerId));
  });

  it('node 3 restarted with the same home is reachable again from node 1, with no restart of the others', async () => {
    n3 = await restart(n3, { DMS_NETWORK_BOOTSTRAP_PEERS: listenAddr(n1) });
    const reply = await waitFor('an invoke from node 1 to reach the restarted node 3', async () => {
      const { env } = request(newCaller(), n3.peerId, '/public/hello', 3_000);
      const res = await post(invokeUrl(), encodeEnvelope(env));
      return res.status === 200 && parseEnvelope(res.text);
    });
    await verifyEnvelope(reply);
    expect(reply.from.did).toBe(n3.did);
    await waitFor('node 1 to list node 3 again with its DID', async () => {
      const list = await new DmsClient({ url: n1.url }).invoke<{ dids: Record<string, string> }>('root', '/dms/node/peers/list');
      return list.payload.dids[n3.peerId] === n3.did;
    });
  });

  it('nodes redial their bootstrap peer when it comes back after a crash', async () => {
    await n1.kill();
    await waitFor('nodes 2 and 3 to notice node 1 is gone', async () => {
      const [p2, p3] = await Promise.all([peersOf(n2), peersOf(n3)]);
      return !p2.includes(n1.peerId) && !p3.includes(n1.peerId);
    });
    n1 = await restart(n1, { DMS_NETWORK_LISTEN_ADDRESSES: n1Listen });
    // Node 1 has no bootstrap peers of its own: only the others' redials can reconnect it.
    await waitFor('node 1 to be reconnected to both', async () => {
      const peers = await peersOf(n1);
      return peers.includes(n2.peerId) && peers.includes(n3.peerId);
    });
  });
});
