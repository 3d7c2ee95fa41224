import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startCluster, stopCluster, waitFor } from '../helpers/network.js';
import { type NodeProcess, runCli } from '../helpers/node.js';

// Three named nodes; 2 and 3 join through 1. `dms peers list` on node 1 is what a user types.
let nodes: NodeProcess[] = [];
let n1: NodeProcess;
let n2: NodeProcess;
let n3: NodeProcess;

const nameOf = (i: number) => `peer-node-${i + 1}`;

beforeAll(async () => {
  nodes = await startCluster(3, { node: (i) => ({ config: { general: { name: nameOf(i), log_level: 'warn' } } }) });
  [n1, n2, n3] = nodes;
});
afterAll(() => stopCluster(nodes));

interface ResourceSpec {
  cpu: { cores: number };
  memory: { size: number };
}
interface PeerDescription {
  id: string;
  did: string | null;
  last_seen: string | null;
  profile: { name: string; addrs: string[]; onboarded: ResourceSpec | null; free: ResourceSpec | null; executors: string[] } | null;
}
interface Described {
  peers: string[];
  dids: Record<string, string>;
  nodes: PeerDescription[];
}

/** `dms --json peers list` on `node`, parsed. */
async function describedBy(node: NodeProcess): Promise<Described> {
  const r = await runCli(['--home', node.home, '--json', 'peers', 'list']);
  if (r.code !== 0) throw new Error(`peers list exited ${r.code}: ${r.stderr}`);
  return JSON.parse(r.stdout) as Described;
}

const entry = (d: Described, node: NodeProcess) => d.nodes.find((n) => n.id === node.peerId);

describe('dms peers list: who the peers are and what they offer', { timeout: 120_000 }, () => {
  it('lists the other two nodes with their names, addresses, resources, executors and last seen', async () => {
    const described = await waitFor(
      'node 1 to describe nodes 2 and 3',
      async () => {
        const d = await describedBy(n1);
        return [n2, n3].every((n) => entry(d, n)?.profile?.name) && d;
      },
      { timeoutMs: 60_000, intervalMs: 500 },
    );
    for (const [node, i] of [[n2, 1], [n3, 2]] as const) {
      const e = entry(described, node)!;
      expect(e.did).toBe(node.did);
      expect(e.profile!.name).toBe(nameOf(i));
      // Nothing onboarded yet: a fresh node offers nothing to the network, whatever its machine.
      expect(e.profile!.onboarded).toBeNull();
      expect(e.profile!.free).toBeNull();
      expect(e.profile!.executors).toEqual(expect.arrayContaining(['docker', 'null']));
      expect(e.profile!.addrs.some((a) => a.endsWith(`/p2p/${node.peerId}`))).toBe(true);
      expect(Date.parse(e.last_seen!)).toBeGreaterThan(Date.now() - 120_000);
    }
    // The list of ids and DIDs scripts used before stays as it was.
    expect(described.peers.sort()).toEqual([n2.peerId, n3.peerId].sort());
    expect(described.dids[n3.peerId]).toBe(n3.did);

    const [table, wide] = await Promise.all([runCli(['--home', n1.home, 'peers', 'list']), runCli(['--home', n1.home, 'peers', 'list', '--wide'])]);
    expect(table.code, table.stderr).toBe(0);
    const [head, ...rows] = table.stdout.trimEnd().split('\n');
    expect(head.split(/\s{2,}/)).toEqual(['PEER', 'NAME', 'ADDRESS', 'OFFERED', 'FREE', 'LABELS', 'LOCATION', 'EXECUTORS', 'LAST SEEN']);
    expect(rows).toHaveLength(2);
    for (const [node, i] of [[n2, 1], [n3, 2]] as const) {
      const row = rows.find((r) => r.includes(nameOf(i)));
      expect(row, table.stdout).toBeDefined();
      // Short ids: the end of the peer id, which (unlike its 12D3KooW start) tells peers apart.
      expect(row).toContain(node.peerId.slice(-8));
      expect(row).not.toContain(node.peerId);
      expect(row!.split(/\s{2,}/).slice(3, 5)).toEqual(['—', '—']);
      expect(row).toContain('docker,null');
    }
    expect(wide.code, wide.stderr).toBe(0);
    expect(wide.stdout).toContain(n2.peerId);
    expect(wide.stdout).toContain(n3.did);
  });

  it("shows a new onboarded share of node 2 on node 1 within a bounded time", async () => {
    const share = { cpu: { cores: 1 }, memory: { size: 256 * 1024 * 1024 }, storage: { size: 0 } };
    const res = await fetch(`${n2.url}/api/v1/device/config`, {
      method: 'PUT',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ onboarded: share }),
    });
    expect(res.status, await res.clone().text()).toBe(200);
    const seen = await waitFor(
      "node 1 to see node 2's new share",
      async () => {
        const e = entry(await describedBy(n1), n2);
        const onboarded = e?.profile?.onboarded;
        return onboarded?.cpu.cores === 1 && onboarded.memory.size === share.memory.size && e;
      },
      { timeoutMs: 60_000, intervalMs: 500 },
    );
    expect(seen.profile!.name).toBe(nameOf(1));
    const table = await runCli(['--home', n1.home, 'peers', 'list']);
    expect(table.stdout.split('\n').find((r) => r.includes(nameOf(1)))).toContain('1 cpu, 256 MiB');
  });

  it('/public/describe, which other nodes call, answers the published profile and nothing more', async () => {
    const r = await runCli(['--home', n1.home, 'actor', 'invoke', '/public/describe']);
    expect(r.code, r.stderr).toBe(0);
    const profile = JSON.parse(r.stdout) as Record<string, unknown>;
    expect(Object.keys(profile).sort()).toEqual(['addrs', 'executors', 'free', 'labels', 'location', 'name', 'onboarded', 'version'].sort());
    expect(profile.name).toBe(nameOf(0));
  });
});
