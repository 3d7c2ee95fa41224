/**
 * A forward lasts as long as its job (README "Ports and tunnels"): once the job ends, however
 * it ends, its listeners close and no longer count against tunnel.max_forwards, and a forward
 * asked for a job that has ended is refused. The null executor runs the jobs (no Docker): a
 * connection to a forward of one gets no tunnel, but the listener, and the bound, are the node's.
 */
import { type AddressInfo, connect, createServer } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PortForwards } from '../../daemon/tunnels.js';
import { silentLogger } from '../../runtime/log.js';
import { type LocalNode, startLocalNode } from '../helpers/local-node.js';
import { startCluster, stopCluster } from '../helpers/network.js';
import { removeHome } from '../helpers/node.js';
import { type JobNodeScene, jobNodeScene, nullJob, Rest, startLocalJobNode, until } from '../jobs/helpers.js';

/** The default tunnel.max_forwards. */
const MAX_FORWARDS = 32;

let scene: JobNodeScene<LocalNode> | undefined;
let node: LocalNode;
let rest: Rest;

beforeAll(async () => void ({ node, rest } = scene = await jobNodeScene(startLocalJobNode)));
afterAll(() => scene?.stop());

type Forward = { id: string; job_id: string; port: number; local: string };

const runningJob = async (durationMs: number) => {
  const job = await rest.submit({ ...nullJob({ name: 'p', durationMs }), ports: [8080] });
  await rest.waitFor(job.id, ['running'], 10_000);
  return job.id;
};

const forward = async (jobId: string): Promise<Forward> => {
  const r = await rest.post<Forward>(`/api/v1/jobs/${jobId}/ports/8080/forward`, {});
  expect(r.status, JSON.stringify(r.body)).toBe(201);
  return r.body;
};

/** Whether anything still listens at ADDR:PORT: a refused connection says no. */
const listening = (local: string) =>
  new Promise<boolean>((resolve) => {
    const i = local.lastIndexOf(':');
    const socket = connect(Number(local.slice(i + 1)), local.slice(0, i));
    socket.setTimeout(2_000, () => (socket.destroy(), resolve(true)));
    socket.once('connect', () => (socket.destroy(), resolve(true)));
    socket.once('error', () => resolve(false));
  });

const forwardsOf = async (jobId: string) => {
  const r = await rest.get<{ status: string; forwards: Forward[] }>(`/api/v1/jobs/${jobId}/ports`);
  expect(r.status).toBe(200);
  return r.body;
};

describe('port forwards end with their job', { timeout: 30_000 }, () => {
  it('closes every forward of a cancelled job, frees tunnel.max_forwards, and refuses a forward to it after', async () => {
    const jobId = await runningJob(60_000);
    const opened: Forward[] = [];
    for (let i = 0; i < MAX_FORWARDS; i++) opened.push(await forward(jobId));
    expect((await forwardsOf(jobId)).forwards).toHaveLength(MAX_FORWARDS);
    expect(await listening(opened[0].local)).toBe(true);
    const full = await rest.post(`/api/v1/jobs/${jobId}/ports/8080/forward`, {});
    expect(full.status).toBe(503);

    expect((await rest.delete(`/api/v1/jobs/${jobId}`)).status).toBe(200);
    const ended = await until('the cancelled job to hold no forwards', async () => {
      const ports = await forwardsOf(jobId);
      return ports.forwards.length === 0 ? ports : undefined;
    }, 5_000);
    expect(ended.status).toBe('failed');
    for (const f of opened) expect(await listening(f.local), `${f.local} still listens`).toBe(false);

    // The bound counts forwards that are open: another job gets one at once.
    const other = await runningJob(60_000);
    const again = await forward(other);
    expect(await listening(again.local)).toBe(true);

    const late = await rest.post<{ error: string }>(`/api/v1/jobs/${jobId}/ports/8080/forward`, {});
    expect(late.status).toBe(409);
    expect(late.body.error).toMatch(/has ended \(failed\)/);
    expect((await forwardsOf(jobId)).forwards).toEqual([]);
    expect((await rest.delete(`/api/v1/jobs/${other}`)).status).toBe(200);
    await until('the other job to hold no forwards', async () => (await forwardsOf(other)).forwards.length === 0, 5_000);
    expect(await listening(again.local)).toBe(false);
  });

  it('holds tunnel.max_forwards against forwards asked for all at once', async () => {
    const jobId = await runningJob(60_000);
    const job = await rest.job(jobId);
    // Asked of the forwards themselves, every request is checked before any listener is open,
    // as requests arriving together may be; open() reads only the config and the log.
    const forwards = new PortForwards({ host: node.peerId, system: node.node.system, config: node.node.config, log: silentLogger(), storage: undefined as never, docker: undefined as never });
    try {
      const asked = await Promise.allSettled(Array.from({ length: 2 * MAX_FORWARDS }, () => forwards.open(job, 8080)));
      expect(asked.filter((a) => a.status === 'fulfilled')).toHaveLength(MAX_FORWARDS);
      const refused = asked.flatMap((a) => (a.status === 'rejected' ? [(a.reason as Error).message] : []));
      expect(refused).toEqual(Array(MAX_FORWARDS).fill(`this node already holds ${MAX_FORWARDS} forwards (tunnel.max_forwards): stop one first`));
      expect(forwards.list(jobId)).toHaveLength(MAX_FORWARDS);
      // A listener that cannot open gives its place back.
      forwards.stop();
      const holder = createServer();
      await new Promise<void>((r) => holder.listen(0, '127.0.0.1', r));
      const held = (holder.address() as AddressInfo).port;
      const taken = forwards.open(job, 8080, `127.0.0.1:${held}`);
      await expect(taken).rejects.toThrow(`cannot listen on 127.0.0.1:${held}`);
      holder.close();
      const again = await Promise.allSettled(Array.from({ length: MAX_FORWARDS }, () => forwards.open(job, 8080)));
      expect(again.every((a) => a.status === 'fulfilled')).toBe(true);
    } finally {
      forwards.stop();
      expect((await rest.delete(`/api/v1/jobs/${jobId}`)).status).toBe(200);
    }
  });

  it('closes the forwards of a job that completes on its own', async () => {
    const jobId = await runningJob(1_500);
    const opened = [await forward(jobId), await forward(jobId)];
    await rest.waitFor(jobId, ['completed'], 10_000);
    await until('the completed job to hold no forwards', async () => (await forwardsOf(jobId)).forwards.length === 0, 5_000);
    for (const f of opened) expect(await listening(f.local)).toBe(false);
    const late = await rest.post<{ error: string }>(`/api/v1/jobs/${jobId}/ports/8080/forward`, {});
    expect(late.status).toBe(409);
    expect(late.body.error).toMatch(/has ended \(completed\)/);
  });
});

describe('where a forward listens', { timeout: 30_000 }, () => {
  it('is a loopback address unless tunnel.forward_any_address is set: 0.0.0.0 opened the job to the whole network, without credentials', async () => {
    const jobId = await runningJob(20_000);
    for (const local of ['0.0.0.0:0', '[::]:0', '0.0.0.0']) {
      const r = await rest.post<{ error: string }>(`/api/v1/jobs/${jobId}/ports/8080/forward`, { local });
      expect(r.status, `${local}: ${JSON.stringify(r.body)}`).toBe(400);
      expect(r.body.error).toMatch(/not a loopback address.*tunnel\.forward_any_address/);
    }
    for (const local of ['127.0.0.1:0', '[::1]:0', 'localhost:0', '127.0.0.2:0']) {
      const r = await rest.post<Forward>(`/api/v1/jobs/${jobId}/ports/8080/forward`, { local });
      expect(r.status, `${local}: ${JSON.stringify(r.body)}`).toBe(201);
    }
    expect((await rest.delete(`/api/v1/jobs/${jobId}`)).status).toBe(200);
  });

  it('may be any address on a node that allows it', async () => {
    const open = await startLocalJobNode({ config: { tunnel: { forward_any_address: true } } });
    try {
      const r0 = new Rest(open.url);
      const job = await r0.submit({ ...nullJob({ name: 'p', durationMs: 20_000 }), ports: [8080] });
      await r0.waitFor(job.id, ['running'], 10_000);
      const r = await r0.post<Forward>(`/api/v1/jobs/${job.id}/ports/8080/forward`, { local: '0.0.0.0:0' });
      expect(r.status, JSON.stringify(r.body)).toBe(201);
      expect(r.body.local).toMatch(/^0\.0\.0\.0:\d+$/);
      await r0.delete(`/api/v1/jobs/${job.id}`);
    } finally {
      await open.stop();
      removeHome(open.home);
    }
  });
});

describe('port forwards to a job on another node end with it', { timeout: 30_000 }, () => {
  let a: LocalNode;
  let b: LocalNode;

  beforeAll(async () => {
    [a, b] = await startCluster(2, { start: startLocalNode });
    expect((await new Rest(b.url).put('/api/v1/device/config', { onboarded: { cpu: 1, memory: '1GiB' } })).status).toBe(200);
  }, 60_000);
  afterAll(() => stopCluster([a, b]));

  it('closes the forwards on the requester when the job it placed elsewhere is cancelled', async () => {
    const onA = new Rest(a.url);
    const job = await onA.submit({ ...nullJob({ name: 'p', durationMs: 60_000 }), ports: [8080], placement: { node: b.peerId } });
    const running = await onA.waitFor(job.id, ['running'], 15_000);
    expect(running.node).toBe(b.peerId);
    const r = await onA.post<Forward>(`/api/v1/jobs/${job.id}/ports/8080/forward`, {});
    expect(r.status, JSON.stringify(r.body)).toBe(201);
    expect(await listening(r.body.local)).toBe(true);

    expect((await onA.delete(`/api/v1/jobs/${job.id}`)).status).toBe(200);
    await until('the cancelled job to hold no forwards on its requester', async () => {
      const ports = await onA.get<{ forwards: Forward[] }>(`/api/v1/jobs/${job.id}/ports`);
      return ports.body.forwards.length === 0;
    }, 5_000);
    expect(await listening(r.body.local)).toBe(false);
  });
});
