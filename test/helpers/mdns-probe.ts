/**
 * Runs inside a fresh network namespace (`unshare -rn`, started by test/network/mdns.test.ts):
 * brings loopback up for multicast, starts two nodes with mDNS on and no bootstrap peers plus
 * one with mDNS off, waits until the first two list each other, and prints one JSON line with
 * what every node saw. mDNS sends real multicast; inside the namespace it reaches nobody else.
 */
import { execFileSync } from 'node:child_process';
import { DmsClient } from '../../client/client.js';
import { removeHome, startNode, type NodeProcess } from './node.js';
import { waitFor } from './network.js';

export interface ProbeNode {
  peerId: string;
  did: string;
  mdns: boolean;
  peers: string[];
  dids: Record<string, string>;
}

export interface ProbeResult {
  nodes: ProbeNode[];
  /** Time from the nodes being up to both mDNS nodes listing each other. */
  found_ms: number;
}

// A new namespace has only `lo`, down; multicast on it needs the flag and a route for 224/4.
for (const args of [
  ['link', 'set', 'lo', 'up'],
  ['link', 'set', 'lo', 'multicast', 'on'],
  ['route', 'replace', '224.0.0.0/4', 'dev', 'lo'],
]) {
  execFileSync('ip', args, { stdio: ['ignore', 'ignore', 'inherit'] });
}

const withMdns = (mdns: boolean) => ({ config: { network: { EnableMDNS: mdns } }, timeoutMs: 45_000 });
const nodes: NodeProcess[] = [];
const flags = [true, true, false];
try {
  for (const r of await Promise.allSettled(flags.map((m) => startNode(withMdns(m))))) {
    if (r.status === 'fulfilled') nodes.push(r.value);
    else throw r.reason;
  }
  const list = (n: NodeProcess) => new DmsClient({ url: n.url, timeoutMs: 5_000 }).invoke<{ peers: string[]; dids: Record<string, string> }>('root', '/dms/node/peers/list');
  const started = Date.now();
  const [a, b] = nodes;
  // Found means listed with the DID from the hello exchange: connected, and talking DMS.
  await waitFor(
    'the two mDNS nodes to find each other',
    async () => {
      const [la, lb] = await Promise.all([list(a), list(b)]);
      return la.payload.dids[b.peerId] === b.did && lb.payload.dids[a.peerId] === a.did;
    },
    // mDNS asks again every 10 s, so a first query lost while a neighbour was still starting costs one round.
    { timeoutMs: 60_000 },
  );
  const found_ms = Date.now() - started;
  const seen = await Promise.all(nodes.map(list));
  const result: ProbeResult = {
    nodes: nodes.map((n, i) => ({ peerId: n.peerId, did: n.did, mdns: flags[i], peers: seen[i].payload.peers, dids: seen[i].payload.dids })),
    found_ms,
  };
  process.stdout.write(`${JSON.stringify(result)}\n`);
} catch (e) {
  process.stderr.write(`mdns probe failed: ${(e as Error).stack ?? String(e)}\n`);
  for (const n of nodes) process.stderr.write(`--- node ${n.peerId} log:\n${n.logs()}\n`);
  process.exitCode = 1;
} finally {
  await Promise.all(nodes.map((n) => n.stop()));
  for (const n of nodes) removeHome(n.home);
}
