/**
 * A provider that picks a job up again, or runs one its requester no longer follows, asks the
 * requester whether the job is still wanted there. The requester's cancel outbox
 * (./cancel-after-restart.test.ts) tells a provider that missed a cancel, but it keeps only the
 * newest 1,024 for a day, and it goes with the requester's home: with its row gone, the provider
 * ran the container on for good and held its share. Two node processes, each killed with kill -9:
 *
 * - the requester's stored cancel removed (its bound, or a lost row) before the provider
 *   restarts: the provider, picking the job up, asks, hears that it ended there, and stops it;
 * - the requester's home lost while the provider stays up: the provider, no longer followed,
 *   asks and gets no answer (the job runs on), then asks the requester started again on a fresh
 *   home with its old key, hears that it does not know the job, and stops it.
 */
import { cpSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, describe, expect, it } from 'vitest';
import { openStorage } from '../../storage/index.js';
import { dockerForTests, removeContainersOf, TEST_IMAGE } from '../helpers/docker.js';
import { freePort, listenAddr, stopCluster, waitFor } from '../helpers/network.js';
import { type NodeProcess, startNode, tempHome } from '../helpers/node.js';
import { rest } from '../helpers/rest.js';

const { docker, problem } = await dockerForTests('a provider asking its requester about a job');

type Job = { id: string; status: string; node: string | null; error: string | null; requester: string | null };
type Usage = { allocated: { cpu: { cores: number } } };

/** How often the provider of the second case asks about a job nobody follows (default 5 min). */
const ASK_MS = 1_000;

describe.skipIf(problem !== null)('a provider asks the requester whether a job it runs is still wanted', { timeout: 150_000 }, () => {
  const nodes: NodeProcess[] = [];

  afterAll(async () => {
    for (const n of nodes) await removeContainersOf(docker, n);
    await stopCluster(nodes);
  });

  /** Starts a node and keeps it for the clean-up (a node stopped already, or whose home another shares, is harmless there). */
  const start = async (opts: Parameters<typeof startNode>[0]) => {
    const n = await startNode({ timeoutMs: 45_000, ...opts });
    nodes.push(n);
    return n;
  };
  const containersOf = async (jobId: string) => (await docker.listContainers({ filters: { label: [`dms.job=${jobId}`] } })).length;
  const onProvider = async (p: NodeProcess, id: string) => ((await rest(p, 'GET', '/api/v1/jobs')).json as Job[]).find((j) => j.id === id);
  const stoppedThere = (p: NodeProcess, id: string) => async () => {
    const there = await onProvider(p, id);
    return there?.status === 'failed' && (await containersOf(id)) === 0 ? there : undefined;
  };
  const explain = (p: NodeProcess, id: string) => async () => {
    const there = await onProvider(p, id);
    return `the provider's record: ${there ? `${there.status} (${there.error ?? 'no error'})` : 'none'}; containers of the job: ${await containersOf(id)}`;
  };

  /** Places a sleeping container on `p` from `r` and waits until it runs there. */
  async function place(r: NodeProcess, p: NodeProcess, name: string): Promise<string> {
    const made = await rest(r, 'POST', '/api/v1/jobs', { name, image: TEST_IMAGE, command: ['sleep', '600'], resources: { cpu: 0.1, memory: '32MiB' }, placement: { node: p.peerId } });
    expect(made.status, JSON.stringify(made.json)).toBe(201);
    const id = (made.json as Job).id;
    await waitFor('the job running on the provider', async () => ((await rest(r, 'GET', `/api/v1/jobs/${id}`)).json as Job).status === 'running' || undefined, { timeoutMs: 20_000 });
    await waitFor('its container running', async () => (await containersOf(id)) === 1 || undefined, { timeoutMs: 20_000 });
    return id;
  }

  it('stops a job it picks up after its restart once the requester answers that the job ended there', async () => {
    const pListen = `/ip4/127.0.0.1/tcp/${await freePort()}`;
    let r = await start({ config: { deployment: { lost_after_ms: 2_000 } } });
    const pEnv = () => ({ DMS_NETWORK_LISTEN_ADDRESSES: pListen, DMS_NETWORK_BOOTSTRAP_PEERS: listenAddr(r) });
    let p = await start({ env: pEnv() });
    expect((await rest(p, 'PUT', '/api/v1/device/config', { onboarded: { cpu: 1, memory: '1GiB' } })).status).toBe(200);
    const id = await place(r, p, 'forgotten-cancel');

    await p.kill();
    const cancelled = await rest(r, 'DELETE', `/api/v1/jobs/${id}`);
    expect(cancelled.status).toBe(200);
    expect((cancelled.json as Job).status).toBe('failed');

    // The requester's outbox loses the cancel, as past its bound (the newest 1,024, a day) or with its row.
    await r.kill();
    const storage = await openStorage(join(r.home, 'dms.sqlite'));
    try {
      expect((await storage.cancels.list()).map((c) => c.job_id)).toContain(id);
      await storage.cancels.remove(id);
    } finally {
      await storage.close();
    }
    r = await start({ home: r.home, config: { deployment: { lost_after_ms: 2_000 } } });
    p = await start({ home: p.home, env: pEnv() });

    const there = await waitFor('the job stopped on the provider, its requester asked about it', stoppedThere(p, id), { timeoutMs: 30_000, explain: explain(p, id) });
    expect(there.error).toContain(`its requester ${r.peerId}`);
    expect(there.error).toContain('ended there');
    await waitFor('its share free again on the provider', async () => ((await rest(p, 'GET', '/api/v1/resources/usage')).json as Usage).allocated.cpu.cores === 0 || undefined, { timeoutMs: 10_000 });
  });

  it('stops a job its requester no longer follows once the requester, back on a fresh home, does not know it', async () => {
    const rListen = `/ip4/127.0.0.1/tcp/${await freePort()}`;
    const pListen = `/ip4/127.0.0.1/tcp/${await freePort()}`;
    const r = await start({ env: { DMS_NETWORK_LISTEN_ADDRESSES: rListen } });
    const p = await start({ config: { deployment: { unfollowed_ask_ms: ASK_MS } }, env: { DMS_NETWORK_LISTEN_ADDRESSES: pListen, DMS_NETWORK_BOOTSTRAP_PEERS: listenAddr(r) } });
    expect((await rest(p, 'PUT', '/api/v1/device/config', { onboarded: { cpu: 1, memory: '1GiB' } })).status).toBe(200);
    const id = await place(r, p, 'lost-home');
    // Followed: the requester's polls answer for it, and nothing is asked.
    await sleep(3 * ASK_MS);
    expect((await onProvider(p, id))?.status).toBe('running');

    await r.kill();
    // Unfollowed and unanswered: asked about every second, the job runs on (the requester may come back).
    await sleep(5 * ASK_MS);
    expect((await onProvider(p, id))?.status).toBe('running');
    expect(await containersOf(id)).toBe(1);

    // Its home lost, the operator starts the node again with its key.
    const fresh = tempHome();
    mkdirSync(join(fresh, 'keys'), { recursive: true, mode: 0o700 });
    cpSync(join(r.home, 'keys'), join(fresh, 'keys'), { recursive: true });
    const back = await start({ home: fresh, env: { DMS_NETWORK_LISTEN_ADDRESSES: rListen, DMS_NETWORK_BOOTSTRAP_PEERS: `${pListen}/p2p/${p.peerId}` } });
    expect(back.peerId).toBe(r.peerId);

    const there = await waitFor('the job stopped on the provider, its requester asked about it', stoppedThere(p, id), { timeoutMs: 30_000, explain: explain(p, id) });
    expect(there.error).toContain(`its requester ${r.peerId}`);
    expect(there.error).toContain('does not know');
  });
});
