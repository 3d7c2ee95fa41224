// An operator's first day, typed as the README says: three nodes started with `dms start
// --detach` (the second and third bootstrapped to the first), the operator of node 3 onboards a
// share with labels and a region from the CLI, node 1 sees them in `dms peers list`, a job asking
// for the label lands on node 3 and says so, and a job pinned to a node offering nothing fails
// at once naming why. Then offboarding, refused while node 3 runs a job for node 1 unless --force.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Job } from '../../behaviors/jobs/schema.js';
import { waitFor } from '../helpers/network.js';
import { removeHome, runCli, tempHome } from '../helpers/node.js';

interface Node {
  home: string;
  url: string;
  peerId: string;
}

const nodes: Node[] = [];
const homes: string[] = [];
const dms = (n: Node, ...args: string[]) => runCli(['--home', n.home, ...args]);
/** A null-executor job: small, runs without Docker. */
const NULL_JOB = ['--executor', 'null', '--cpu', '0.1', '--memory', '16MiB'];

async function start(env: Record<string, string> = {}): Promise<Node> {
  const home = tempHome('dms-operator-day-');
  homes.push(home);
  // As the README's Network section: its own REST port and libp2p port (here: free ones).
  const r = await runCli(['--home', home, 'start', '--port', '0', '--listen', '/ip4/127.0.0.1/tcp/0', '--detach'], env);
  if (r.code !== 0) throw new Error(`dms start --detach exited ${r.code}: ${r.stderr}`);
  const self = await runCli(['--home', home, '--json', 'peers', 'self']);
  const { id, addrs } = JSON.parse(self.stdout) as { id: string; addrs: string[] };
  const status = JSON.parse((await runCli(['--home', home, '--json', 'status'])).stdout) as { url: string };
  return Object.assign({ home, url: status.url, peerId: id }, { addr: addrs[0] });
}

let n1: Node;
let n2: Node;
let n3: Node;

beforeAll(async () => {
  n1 = await start();
  const addr = (n1 as Node & { addr: string }).addr;
  [n2, n3] = await Promise.all([start({ DMS_NETWORK_BOOTSTRAP_PEERS: addr }), start({ DMS_NETWORK_BOOTSTRAP_PEERS: addr })]);
  nodes.push(n1, n2, n3);
}, 120_000);

afterAll(async () => {
  await Promise.all(nodes.map((n) => dms(n, 'stop')));
  homes.forEach(removeHome);
}, 60_000);

/** The row of `dms peers list` on node 1 for `peer`, once `ready` holds for it. */
async function rowOn(n: Node, peer: Node, what: string, ready: (row: string) => boolean): Promise<string> {
  return waitFor(
    what,
    async () => {
      const r = await dms(n, 'peers', 'list');
      const row = r.stdout.split('\n').find((l) => l.startsWith(`…${peer.peerId.slice(-8)}`));
      return row && ready(row) ? row : undefined;
    },
    { timeoutMs: 45_000, intervalMs: 500 },
  );
}

describe("an operator's first day", { timeout: 120_000 }, () => {
  it('a fresh node says in words that it offers nothing, in resources show, onboard --show and peers list', async () => {
    const resources = await dms(n2, 'resources', 'show');
    expect(resources.code, resources.stderr).toBe(0);
    expect(resources.stdout).toContain('offered to the network: nothing (run `dms onboard`)');
    expect(resources.stdout).not.toMatch(/^onboarded/m);
    const show = await dms(n2, 'onboard', '--show');
    expect(show.code, show.stderr).toBe(0);
    expect(show.stdout).toContain('offered to the network: nothing (run `dms onboard`)');
    const row = await rowOn(n1, n2, "node 2's profile on node 1", (r) => r.includes('docker'));
    const head = (await dms(n1, 'peers', 'list')).stdout.split('\n')[0];
    expect(head.split(/\s{2,}/)).toEqual(['PEER', 'NAME', 'ADDRESS', 'OFFERED', 'FREE', 'LABELS', 'LOCATION', 'EXECUTORS', 'LAST SEEN']);
    // Its offer and free share are "—", not its whole machine.
    expect(row.split(/\s{2,}/).slice(3, 5)).toEqual(['—', '—']);
  });

  it('node 3 onboards a share with labels and a region; node 1 sees them in peers list', async () => {
    const r = await dms(n3, 'onboard', '--cpu', '1', '--memory', '256MiB', '--disk', '1GiB', '--label', 'zone=lab', '--label', 'tier=gold', '--region', 'eu-west', '--name', 'node-three');
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toContain('offered to the network: 1 core, 256 MiB memory, 1 GiB disk');
    expect(r.stdout).toContain('zone=lab,tier=gold');
    expect(r.stdout).toContain('eu-west');
    const show = JSON.parse((await dms(n3, '--json', 'onboard', '--show')).stdout) as { offered: boolean; labels: Record<string, string>; location: { region?: string } };
    expect(show).toMatchObject({ offered: true, labels: { zone: 'lab', tier: 'gold' }, location: { region: 'eu-west' } });

    const row = await rowOn(n1, n3, "node 3's share, labels and region on node 1", (l) => l.includes('zone=lab'));
    expect(row).toContain('node-three');
    // The disk it offers too: a job asking for storage is placed by it.
    expect(row).toContain('1 cpu, 256 MiB, 1 GiB disk');
    expect(row).toContain('zone=lab,tier=gold');
    expect(row).toContain('eu-west');
    const resources = await dms(n3, 'resources', 'show');
    expect(resources.stdout).toContain('offered to the network: 1 core, 256 MiB memory, 1 GiB disk');
  });

  it('dms run --label on node 1 lands on node 3 and says so', async () => {
    await rowOn(n1, n3, 'node 3 labelled on node 1', (l) => l.includes('zone=lab'));
    const r = await dms(n1, 'run', '--label', 'zone=lab', ...NULL_JOB, '-e', 'DMS_NULL_STDOUT=hello from three', 'none');
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toContain('hello from three');
    expect(r.stderr).toMatch(new RegExp(`job \\S+ (runs|ran) on …${n3.peerId.slice(-8)} \\(node-three\\)`));
    // Its record on node 1 says where it ran, and no peer id posing as a container.
    const id = /submitted job (\S+)/.exec(r.stderr)![1];
    const described = await dms(n1, 'jobs', 'describe', id);
    const container = described.stdout.split('\n').find((l) => l.startsWith('container'));
    // Ended: no container is left there either (it said "runs on", pointing there, for a completed job).
    expect(container).toBe(`container    none here: it ran on …${n3.peerId.slice(-8)}`);
  });

  it('dms run --node <a peer offering nothing> fails at once, naming why', async () => {
    await rowOn(n1, n2, "node 2's profile on node 1", (l) => l.includes('docker'));
    const t0 = Date.now();
    const r = await dms(n1, 'run', '--node', n2.peerId, ...NULL_JOB, 'none');
    expect(Date.now() - t0).toBeLessThan(10_000);
    expect(r.code).not.toBe(0);
    expect(r.stdout).toBe('');
    expect(r.stderr).toContain(`placement.node: ${n2.peerId}`);
    expect(r.stderr).toContain('offers nothing to the network (no onboarded share; its operator offers one with `dms onboard`)');
    // Nothing was stored: the submission was refused, not left pending.
    const jobs = JSON.parse((await dms(n1, '--json', 'jobs', 'list')).stdout) as Job[];
    expect(jobs.filter((j) => j.placement?.node === n2.peerId)).toEqual([]);
  });

  it('a share onboarded a moment ago is not refused from the copy of the profile node 1 read before', async () => {
    const onboard = await dms(n2, 'onboard', '--cpu', '0.5', '--memory', '128MiB', '--name', 'node-two');
    expect(onboard.code, onboard.stderr).toBe(0);
    const r = await dms(n1, 'run', '--node', n2.peerId, ...NULL_JOB, '-e', 'DMS_NULL_STDOUT=hello from two', 'none');
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toContain('hello from two');
    expect(r.stderr).toMatch(new RegExp(`job \\S+ (runs|ran) on …${n2.peerId.slice(-8)} \\(node-two\\)`));
  });

  it('dms offboard is refused while node 3 runs a job for node 1; --force cancels it and node 1 sees why', async () => {
    const submitted = await dms(n1, 'run', '--detach', '--id-only', '--label', 'zone=lab', ...NULL_JOB, '-e', 'DMS_NULL_DURATION_MS=120000', 'none');
    expect(submitted.code, submitted.stderr).toBe(0);
    const id = submitted.stdout.trim();
    await waitFor(
      'the job to run on node 3',
      async () => {
        const job = JSON.parse((await dms(n1, '--json', 'jobs', 'status', id)).stdout) as Job;
        return job.status === 'running' && job.node === n3.peerId;
      },
      { timeoutMs: 30_000, intervalMs: 300 },
    );
    const refused = await dms(n3, 'offboard');
    expect(refused.code).not.toBe(0);
    expect(refused.stderr).toMatch(/^dms: 1 job runs here for other nodes \(\w{8}\): wait for them to end, or `dms offboard --force` cancels them/);
    expect((await dms(n3, 'onboard', '--show')).stdout).toContain('offered to the network: 1 core');

    const forced = await dms(n3, 'offboard', '--force');
    expect(forced.code, forced.stderr).toBe(0);
    expect(forced.stdout).toContain('offboarded: this node offers nothing to the network now; cancelled 1 job run for other nodes');
    const ended = await waitFor(
      'node 1 to see its job end with the reason',
      async () => {
        const job = JSON.parse((await dms(n1, '--json', 'jobs', 'status', id)).stdout) as Job;
        return job.status === 'failed' && job;
      },
      { timeoutMs: 30_000, intervalMs: 300 },
    );
    expect(ended.error).toContain('the operator of node-three offboarded it (dms offboard --force)');
    expect((await dms(n3, 'resources', 'show')).stdout).toContain('offered to the network: nothing');
    await rowOn(n1, n3, 'node 3 offering nothing on node 1', (l) => l.split(/\s{2,}/)[3] === '—');
  });

  it('dms run IMAGE CMD --name x gives --name to the command, not to run', async () => {
    const r = await dms(n1, 'run', '--local', '-d', ...NULL_JOB, 'none', 'echo', '--name', 'x', '--cpu', '9');
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toMatch(/^submitted job \S+ \(none\)/);
    const id = /submitted job (\S+)/.exec(r.stdout)![1];
    const job = JSON.parse((await dms(n1, '--json', 'jobs', 'status', id)).stdout) as Job;
    expect(job).toMatchObject({ name: 'none', command: ['echo', '--name', 'x', '--cpu', '9'] });
    expect(job.resources.cpu.cores).toBe(0.1);
  });
});
