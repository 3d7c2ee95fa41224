/**
 * Ports and tunnels: a job pinned to node B declares port 8080 (busybox httpd); `port-forward`
 * on node A, its requester, serves the page to a fetch on A through /dms/tunnel/1.0.0. A
 * stranger is refused (not its job), so is the requester for a port the job did not declare, and
 * a flood of streams past tunnel.max_streams_per_peer is refused while the genuine forward works.
 */
import type { Stream } from '@libp2p/interface';
import { peerIdFromString } from '@libp2p/peer-id';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { jobNetworkName } from '../../actors/executors/container-spec.js';
import type { Libp2pTransport } from '../../runtime/network/libp2p-transport.js';
import { encodeFrame } from '../../runtime/network/frames.js';
import { openTunnel, TUNNEL_PROTOCOL } from '../../runtime/network/tunnel.js';
import { dockerForTests, TEST_IMAGE } from '../helpers/docker.js';
import { type LocalNode, startLocalNode } from '../helpers/local-node.js';
import { startCluster, stopCluster, waitFor } from '../helpers/network.js';
import { ForeignPeer } from '../helpers/peer.js';

const { docker, problem } = await dockerForTests('tunnel test');

const PAGE = 'served through the tunnel';
const HTTPD = ['sh', '-c', `mkdir -p /tmp/www && echo "${PAGE}" > /tmp/www/index.html && exec httpd -f -p 8080 -h /tmp/www`];

describe.skipIf(problem !== null)('port-forward to a job on another node', { timeout: 90_000 }, () => {
  let a: LocalNode;
  let b: LocalNode;
  let stranger: ForeignPeer | undefined;
  let jobId = '';
  let local = '';

  const api = async (node: LocalNode, method: string, path: string, body?: unknown) => {
    const r = await fetch(`${node.url}${path}`, { method, headers: { 'content-type': 'application/json' }, body: body === undefined ? undefined : JSON.stringify(body) });
    return { status: r.status, body: (await r.json()) as Record<string, unknown> };
  };
  const submit = async (node: LocalNode, spec: Record<string, unknown>) => {
    const r = await api(node, 'POST', '/api/v1/jobs', { name: 'httpd', image: TEST_IMAGE, command: HTTPD, resources: { cpu: 0.2, memory: '32MiB' }, ports: [8080], ...spec });
    expect(r.status, JSON.stringify(r.body)).toBe(201);
    return String(r.body.id);
  };
  const running = (node: LocalNode, id: string) =>
    waitFor(`job ${id} running on ${node.peerId.slice(-6)}`, async () => {
      const j = (await api(node, 'GET', `/api/v1/jobs/${id}`)).body;
      if (j.status === 'failed' || j.status === 'completed') throw new Error(`job ended: ${JSON.stringify(j)}`);
      return j.status === 'running' ? j : undefined;
    }, { timeoutMs: 40_000 });
  const page = (address: string) =>
    waitFor(`the page through ${address}`, async () => {
      try {
        const r = await fetch(`http://${address}/`, { signal: AbortSignal.timeout(3_000) });
        return r.status === 200 ? await r.text() : undefined;
      } catch {
        return undefined;
      }
    }, { timeoutMs: 20_000, intervalMs: 250 });
  const libp2pOf = (node: LocalNode) => (node.node.system.network as Libp2pTransport).node;

  beforeAll(async () => {
    [a, b] = await startCluster(2, { start: startLocalNode });
    expect((await api(b, 'PUT', '/api/v1/device/config', { onboarded: { cpu: 1, memory: '1GiB' } })).status).toBe(200);
    jobId = await submit(a, { placement: { node: b.peerId } });
    await running(a, jobId);
    await running(b, jobId);
  }, 80_000);

  afterAll(async () => {
    await stranger?.stop();
    for (const n of [a, b]) {
      const left = await docker.listContainers({ all: true, filters: { label: [`dms.node=${n?.peerId}`] } });
      await Promise.all(left.map((c) => docker.getContainer(c.Id).remove({ force: true }).catch(() => undefined)));
    }
    await stopCluster([a, b]);
    if (jobId) await docker.getNetwork(jobNetworkName(jobId)).remove().catch(() => undefined);
  });

  it('lists the ports a job exposes and where it runs', async () => {
    const r = await api(a, 'GET', `/api/v1/jobs/${jobId}/ports`);
    expect(r.status).toBe(200);
    expect(r.body).toMatchObject({ job_id: jobId, status: 'running', node: b.peerId, ports: [8080], forwards: [] });
    // A stranger's job with ports has an internal network of its own on B, not none and not the host's.
    const [container] = await docker.listContainers({ filters: { label: [`dms.job=${jobId}`] } });
    expect(container.HostConfig.NetworkMode).toBe(jobNetworkName(jobId));
    expect((await docker.getNetwork(jobNetworkName(jobId)).inspect()).Internal).toBe(true);
  });

  it('refuses a port the job does not declare, and a bad local address, with a 400', async () => {
    expect((await api(a, 'POST', `/api/v1/jobs/${jobId}/ports/9090/forward`, {})).status).toBe(400);
    const bad = await api(a, 'POST', `/api/v1/jobs/${jobId}/ports/8080/forward`, { local: 'example.com:80' });
    expect(bad.status).toBe(400);
    expect(String(bad.body.error)).toMatch(/local/);
  });

  it('serves the page to a fetch on node A through a forward on A', async () => {
    const r = await api(a, 'POST', `/api/v1/jobs/${jobId}/ports/8080/forward`, {});
    expect(r.status, JSON.stringify(r.body)).toBe(201);
    local = String(r.body.local);
    expect(local).toMatch(/^127\.0\.0\.1:\d+$/);
    expect((await page(local)).trim()).toBe(PAGE);
    expect((await api(a, 'GET', `/api/v1/jobs/${jobId}/ports`)).body.forwards).toEqual([r.body]);
  });

  it('refuses a stranger a tunnel to a job it did not place, and the requester one to an undeclared port, and logs both', async () => {
    stranger = await ForeignPeer.connectedTo(b);
    const bPeer = peerIdFromString(b.peerId);
    await expect(openTunnel(stranger.transport.node, bPeer, { job_id: jobId, port: 8080 })).rejects.toThrow(/refused the tunnel: job .* is not a job peer .* placed on this node/);
    await expect(openTunnel(libp2pOf(a), bPeer, { job_id: jobId, port: 9090 })).rejects.toThrow(/refused the tunnel: job .* does not declare port 9090/);
    await waitFor('both refusals in node B\'s log', () => (b.logs().match(/tunnel refused/g) ?? []).length >= 2, { timeoutMs: 5_000 });
  });

  it('answers a header that is oversized or not JSON with an error frame, and stays up', async () => {
    const node = stranger!.transport.node;
    const bPeer = peerIdFromString(b.peerId);
    const reply = async (bytes: Uint8Array) => {
      const stream = await node.dialProtocol(bPeer, TUNNEL_PROTOCOL);
      let text = '';
      const closed = new Promise<void>((resolve) => stream.addEventListener('close', () => resolve()));
      stream.addEventListener('message', (evt) => (text += Buffer.from(evt.data instanceof Uint8Array ? evt.data : evt.data.subarray()).toString('latin1')));
      stream.addEventListener('remoteCloseWrite', () => void stream.close().catch(() => undefined));
      stream.send(bytes);
      await Promise.race([closed, new Promise((r) => setTimeout(r, 8_000))]);
      return text;
    };
    // A length prefix announcing 1 MiB: refused on the prefix, before the bytes.
    expect(await reply(Uint8Array.from([0x80, 0x80, 0x40]))).toMatch(/over the 1024-byte limit/);
    expect(await reply(encodeFrame('{not json'))).toMatch(/not JSON/);
    expect(await reply(encodeFrame(JSON.stringify({ job_id: '../../etc', port: 8080 })))).toMatch(/job_id is not a job id/);
    expect((await api(b, 'GET', '/api/v1/jobs?limit=1')).status).toBe(200);
  });

  it('refuses a flood of streams past tunnel.max_streams_per_peer while the genuine forward still works', async () => {
    const node = stranger!.transport.node;
    const bPeer = peerIdFromString(b.peerId);
    // Streams that never send their header hold a slot each until the header timeout.
    const held: Stream[] = [];
    for (let i = 0; i < 16; i++) held.push(await node.dialProtocol(bPeer, TUNNEL_PROTOCOL));
    try {
      await expect(openTunnel(node, bPeer, { job_id: jobId, port: 8080 })).rejects.toThrow(/tunnel\.max_streams_per_peer/);
      expect((await page(local)).trim()).toBe(PAGE);
    } finally {
      for (const s of held) s.abort(new Error('done'));
    }
  });

  it('stops a forward on DELETE: its port no longer answers', async () => {
    const [forward] = (await api(a, 'GET', `/api/v1/jobs/${jobId}/ports`)).body.forwards as { id: string }[];
    expect((await api(a, 'DELETE', `/api/v1/jobs/${jobId}/forwards/${forward.id}`)).status).toBe(200);
    await expect(fetch(`http://${local}/`, { signal: AbortSignal.timeout(3_000) })).rejects.toThrow();
    expect((await api(a, 'DELETE', `/api/v1/jobs/${jobId}/forwards/${forward.id}`)).status).toBe(404);
  });

  it('forwards to a job running on the node itself by connecting to it directly', async () => {
    const here = await submit(a, { placement: { local: true } });
    await running(a, here);
    const r = await api(a, 'POST', `/api/v1/jobs/${here}/ports/8080/forward`, { local: '127.0.0.1:0' });
    expect(r.status, JSON.stringify(r.body)).toBe(201);
    expect((await page(String(r.body.local))).trim()).toBe(PAGE);
    expect((await api(a, 'DELETE', `/api/v1/jobs/${here}`)).status).toBe(200);
  });

  it('removes the job network once the job is cancelled', async () => {
    expect((await api(a, 'DELETE', `/api/v1/jobs/${jobId}`)).status).toBe(200);
    await waitFor('the job network removed', async () => {
      try {
        await docker.getNetwork(jobNetworkName(jobId)).inspect();
        return undefined;
      } catch {
        return true;
      }
    }, { timeoutMs: 30_000 });
  });
});
