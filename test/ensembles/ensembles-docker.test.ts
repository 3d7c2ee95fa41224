/**
 * Ensembles across three real node processes and Docker (README "Ensembles"): a `server` part
 * (busybox httpd on 8080) and a `client` part that fetches http://server.internal:8080/, on two
 * nodes and on one; the server's node killed with kill -9 and the server placed again on
 * another node, where the client reaches it by the same name; `dms ensemble port-forward` on the
 * requester serving the server's page; a stranger's tunnel to the part refused.
 */
import { spawn } from 'node:child_process';
import { peerIdFromString } from '@libp2p/peer-id';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openTunnel } from '../../runtime/network/tunnel.js';
import { dockerForTests, stopSharingCluster, TEST_IMAGE } from '../helpers/docker.js';
import { waitFor } from '../helpers/network.js';
import { sharingCluster } from '../helpers/sharing-cluster.js';
import { CLI, type NodeProcess, TEST_ENV } from '../helpers/node.js';
import { ForeignPeer } from '../helpers/peer.js';

const { docker, problem } = await dockerForTests('ensembles across nodes');

type Part = { part: string; job_id: string; node: string | null; status: string; error: string | null };
type Ensemble = { id: string; status: string; reason: string | null; parts: Part[] };

/** The server's page names the container it came from: a server placed again serves another. */
const SERVER = 'mkdir -p /tmp/www && echo "hello from $(hostname)" > /tmp/www/index.html && exec httpd -f -p 8080 -h /tmp/www';
/** Fetches until it gets the page once (the server may still be starting), then prints it. (This busybox's wget crashes when given -T.) */
const CLIENT_ONCE = 'for i in $(seq 1 60); do if wget -q -O- http://server.internal:8080/; then exit 0; fi; sleep 1; done; echo "never reached server.internal" >&2; exit 1';
/** Fetches every second for good, printing each page: a retry loop that follows the server by its name. */
const CLIENT_LOOP = 'while true; do wget -q -O- http://server.internal:8080/ || echo "no answer"; sleep 1; done';

describe.skipIf(problem !== null)('ensembles across three nodes with Docker', { timeout: 240_000 }, () => {
  let nodes: NodeProcess[] = [];

  beforeAll(async () => {
    // Node 1 follows its parts closely, so a killed provider is noticed within the test's waits.
    nodes = await sharingCluster(3, { node: (i) => (i === 0 ? { config: { deployment: { lost_after_ms: 3_000, follow_poll_ms: 500 } } } : {}) });
  }, 120_000);

  afterAll(async () => {
    await stopSharingCluster(docker, nodes);
  });

  const api = async (on: NodeProcess, method: string, path: string, body?: unknown) => {
    const r = await fetch(`${on.url}${path}`, { method, headers: { 'content-type': 'application/json' }, body: body === undefined ? undefined : JSON.stringify(body) });
    return { status: r.status, json: (await r.json()) as any };
  };
  const deploy = async (on: NodeProcess, name: string, server: object, client: object): Promise<string> => {
    const part = { image: TEST_IMAGE, resources: { cpu: 0.2, memory: '32MiB' } };
    const r = await api(on, 'POST', '/api/v1/ensembles', { name, parts: { server: { ...part, kind: 'service', ports: [8080], command: SERVER, ...server }, client: { ...part, ...client } } });
    expect(r.status, JSON.stringify(r.json)).toBe(201);
    return (r.json as Ensemble).id;
  };
  const ensemble = async (on: NodeProcess, id: string) => (await api(on, 'GET', `/api/v1/ensembles/${id}`)).json as Ensemble;
  const partOf = (e: Ensemble, name: string) => e.parts.find((p) => p.part === name)!;
  const until = (on: NodeProcess, id: string, what: string, ok: (e: Ensemble) => boolean, timeoutMs = 90_000) =>
    waitFor(what, async () => {
      const e = await ensemble(on, id);
      return ok(e) ? e : undefined;
    }, { timeoutMs });
  const stdout = async (on: NodeProcess, jobId: string) =>
    ((await api(on, 'GET', `/api/v1/jobs/${jobId}/logs`)).json as { chunks: { stream: string; data: string }[] }).chunks
      .filter((c) => c.stream === 'stdout')
      .map((c) => c.data)
      .join('');

  it("completes with the server's page in the client's logs, read on node 1: server on node 3, client on node 2", async () => {
    const [n1, n2, n3] = nodes;
    const id = await deploy(n1, 'apart', { placement: { node: n3.peerId } }, { command: CLIENT_ONCE, placement: { node: n2.peerId } });
    const done = await until(n1, id, 'the ensemble completed', (e) => e.status === 'completed' || e.status === 'failed');
    expect(done.status, JSON.stringify(done)).toBe('completed');
    expect(partOf(done, 'server').node).toBe(n3.peerId);
    expect(partOf(done, 'client').node).toBe(n2.peerId);
    expect(await stdout(n1, partOf(done, 'client').job_id)).toMatch(/^hello from [0-9a-f]{12}\n$/);
    // The service was stopped once the task was done.
    expect(partOf(done, 'server').error).toBe('cancelled: its ensemble completed');
  });

  it('the same with both parts on one node', async () => {
    const [n1, , n3] = nodes;
    const id = await deploy(n1, 'together', { placement: { node: n3.peerId } }, { command: CLIENT_ONCE, placement: { node: n3.peerId } });
    const done = await until(n1, id, 'the ensemble completed', (e) => e.status === 'completed' || e.status === 'failed');
    expect(done.status, JSON.stringify(done)).toBe('completed');
    expect(partOf(done, 'client').node).toBe(n3.peerId);
    expect(await stdout(n1, partOf(done, 'client').job_id)).toMatch(/^hello from [0-9a-f]{12}\n$/);
  });

  it("serves the server's page to a fetch on node 1 through dms ensemble port-forward, and refuses a stranger's tunnel", async () => {
    const [n1, n2, n3] = nodes;
    const id = await deploy(n1, 'forwarded', { placement: { node: n3.peerId } }, { kind: 'service', command: CLIENT_LOOP, placement: { node: n2.peerId } });
    const running = await until(n1, id, 'the ensemble running', (e) => e.status === 'running');
    const cli = spawn(process.execPath, [CLI, '--home', n1.home, 'ensemble', 'port-forward', id.slice(0, 8), 'server:8080'], { env: { ...process.env, ...TEST_ENV }, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    cli.stdout.on('data', (d) => (out += d));
    cli.stderr.on('data', (d) => (out += d));
    try {
      const local = await waitFor('the forward listening', () => /forwarding (\S+) -> ensemble/.exec(out)?.[1], { timeoutMs: 20_000 });
      const page = await waitFor(`the page through ${local}`, async () => {
        const r = await fetch(`http://${local}/`, { signal: AbortSignal.timeout(3_000) }).catch(() => null);
        return r?.status === 200 ? await r.text() : undefined;
      }, { timeoutMs: 20_000, intervalMs: 250 });
      expect(page).toMatch(/^hello from [0-9a-f]{12}\n$/);
    } finally {
      cli.kill('SIGINT');
    }
    // A peer that hosts no part of the ensemble: the server's node refuses its tunnel.
    const stranger = await ForeignPeer.connectedTo(n3);
    try {
      await expect(openTunnel(stranger.transport.node, peerIdFromString(n3.peerId), { job_id: partOf(running, 'server').job_id, port: 8080 })).rejects.toThrow(/not a job peer .* placed on this node|refused/);
    } finally {
      await stranger.stop();
    }
    expect((await api(n1, 'DELETE', `/api/v1/ensembles/${id}`)).json).toMatchObject({ status: 'failed', reason: 'cancelled' });
  });

  it('after kill -9 of the server\'s node, the server runs on node 2 and the client reaches it there by the same name', async () => {
    const [n1, n2, n3] = nodes;
    // Only node 3 has the label at first: the server goes there. Node 2 gets it once both run.
    expect((await api(n3, 'PUT', '/api/v1/device/config', { labels: { serves: 'yes' } })).status).toBe(200);
    await waitFor("node 3's label in the profile node 1 holds", async () => {
      const { nodes: described } = (await api(n1, 'GET', '/api/v1/peers')).json as { nodes: { id: string; profile?: { labels?: Record<string, string> } }[] };
      return described.find((d) => d.id === n3.peerId)?.profile?.labels?.serves === 'yes' || undefined;
    }, { timeoutMs: 30_000 });
    const id = await deploy(n1, 'moving', { placement: { labels: { serves: 'yes' }, max_attempts: 3 } }, { kind: 'service', command: CLIENT_LOOP, placement: { node: n2.peerId } });
    const running = await until(n1, id, 'the ensemble running', (e) => e.status === 'running');
    expect(partOf(running, 'server').node).toBe(n3.peerId);
    const client = partOf(running, 'client').job_id;
    const first = await waitFor('the client reaching the first server', async () => /hello from ([0-9a-f]{12})/.exec(await stdout(n1, client))?.[1], { timeoutMs: 40_000 });
    expect((await api(n2, 'PUT', '/api/v1/device/config', { labels: { serves: 'yes' } })).status).toBe(200);
    await waitFor("node 2's label in the profile node 1 holds", async () => {
      const { nodes: described } = (await api(n1, 'GET', '/api/v1/peers')).json as { nodes: { id: string; profile?: { labels?: Record<string, string> } }[] };
      return described.find((d) => d.id === n2.peerId)?.profile?.labels?.serves === 'yes' || undefined;
    }, { timeoutMs: 30_000 });
    await n3.kill();
    const moved = await until(n1, id, 'the server running on node 2', (e) => partOf(e, 'server').status === 'running' && partOf(e, 'server').node === n2.peerId, 90_000);
    // The client is the same job, and its loop now gets the page of the new server.
    expect(partOf(moved, 'client')).toMatchObject({ job_id: client, status: 'running' });
    const second = await waitFor('the client reaching the server on node 2', async () => {
      const seen = [...(await stdout(n1, client)).matchAll(/hello from ([0-9a-f]{12})/g)].map((m) => m[1]);
      return seen.find((h) => h !== first);
    }, { timeoutMs: 60_000 });
    expect(second).not.toBe(first);
    expect((await api(n1, 'DELETE', `/api/v1/ensembles/${id}`)).json).toMatchObject({ status: 'failed', reason: 'cancelled' });
  });
});
