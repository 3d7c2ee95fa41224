/**
 * Ensembles across real in-process nodes on 127.0.0.1 (null executor): parts placed on the nodes
 * they are pinned to, the lifecycle (a task completing stops the services), all-or-nothing
 * placement (a lease refused for one part lets go of every other lease), a lost node's part
 * placed again alone, and cancel. Names between parts need containers: test/ensembles/ (Docker).
 */
import { afterAll, beforeAll, describe, expect, it, onTestFinished } from 'vitest';
import { setTimeout as sleep } from 'node:timers/promises';
import { DevEvents, listenAddr, startCluster, stopCluster, waitFor } from '../helpers/network.js';
import { type LocalNode, startLocalNode } from '../helpers/local-node.js';
import { rest } from '../helpers/rest.js';

type Part = { part: string; job_id: string; node: string | null; status: string; error: string | null };
type Ensemble = { id: string; status: string; reason: string | null; attempts: number; parts: Part[] };
type Usage = { allocated: { cpu: { cores: number }; memory: { size: number } } };

let a: LocalNode;
let b: LocalNode;
let c: LocalNode;

const ensemble = async (id: string) => (await rest(a, 'GET', `/api/v1/ensembles/${id}`)).json as Ensemble;
const partOf = (e: Ensemble, name: string) => e.parts.find((p) => p.part === name)!;
/** The ensemble once it has the status, waited for at most 20 s. */
const until = (id: string, status: string) =>
  waitFor(`the ensemble ${status}`, async () => {
    const e = await ensemble(id);
    return e.status === status ? e : undefined;
  }, { timeoutMs: 20_000 });
const held = async (node: LocalNode) => ((await rest(node, 'GET', '/api/v1/resources/usage')).json as Usage).allocated.cpu.cores;
const nullPart = (extra: Record<string, unknown>) => ({ image: 'none', executor: 'null', resources: { cpu: 0.25, memory: '16MiB' }, ...extra });

beforeAll(async () => {
  // Node a follows its parts closely, so a lost provider is noticed within the test's waits.
  // Node a is in dev mode: its stream shows the ensemble's machine and its parts' children.
  [a, b, c] = await startCluster(3, { start: startLocalNode, node: (i) => (i === 0 ? { dev: true, config: { deployment: { lost_after_ms: 2_000, follow_poll_ms: 300 } } } : {}) });
  for (const n of [b, c]) expect((await rest(n, 'PUT', '/api/v1/device/config', { onboarded: { cpu: 1, memory: '1GiB' } })).status).toBe(200);
}, 120_000);
afterAll(() => stopCluster([a, b, c]));

describe('an ensemble', { timeout: 60_000 }, () => {
  it('runs its parts where they are pinned, and completes once its task did, stopping its service', async () => {
    const stream = await DevEvents.open(a.url, ['transition'], { actor: 'ensembles' });
    onTestFinished(() => stream.close());
    const made = await rest(a, 'POST', '/api/v1/ensembles', {
      name: 'pair',
      parts: {
        server: nullPart({ kind: 'service', ports: [8080], environment: { DMS_NULL_DURATION_MS: '60000' }, placement: { node: c.peerId } }),
        client: nullPart({ environment: { DMS_NULL_DURATION_MS: '1500', DMS_NULL_STDOUT: 'fetched' }, placement: { node: b.peerId } }),
      },
    });
    expect(made.status, JSON.stringify(made.json)).toBe(201);
    const id = (made.json as Ensemble).id;
    expect((made.json as Ensemble).parts.map((p) => p.part).sort()).toEqual(['client', 'server']);
    const running = await until(id, 'running');
    expect(partOf(running, 'server').node).toBe(c.peerId);
    expect(partOf(running, 'client').node).toBe(b.peerId);
    // Each part is a job of the requester's, on /api/v1/jobs like any other.
    const job = (await rest(a, 'GET', `/api/v1/jobs/${partOf(running, 'server').job_id}`)).json as { ensemble: string; part: string; node: string };
    expect(job).toMatchObject({ ensemble: id, part: 'server', node: c.peerId });
    const done = await until(id, 'completed');
    expect(partOf(done, 'client').status).toBe('completed');
    // One round placed both parts.
    expect(done.attempts).toBe(1);
    expect(partOf(done, 'server')).toMatchObject({ status: 'failed', error: 'cancelled: its ensemble completed' });
    // On the dev stream: the ensemble machine to completed, and each part a child machine of its own.
    await stream.waitFor('the ensemble machine completed', (e) => e.type === 'transition' && e.machine === 'ensemble' && e.instance === id && e.to === 'completed', 5_000);
    await stream.waitFor('the client part running', (e) => e.type === 'transition' && e.machine === 'part' && e.instance === `${id}/client` && e.to === 'running', 5_000);
    await stream.waitFor('the server part failed (stopped)', (e) => e.type === 'transition' && e.machine === 'part' && e.instance === `${id}/server` && e.to === 'failed', 5_000);
    await waitFor('nothing held on b and c', async () => (await held(b)) === 0 && (await held(c)) === 0, { timeoutMs: 10_000 });
  });

  it("takes a part's inputs as a job's: job:<id>/<name> resolved to its CID where it is deployed, a volume only pinned here", async () => {
    const files = JSON.stringify({ '/outputs/a.txt': 'from the first job\n' });
    const first = await rest(a, 'POST', '/api/v1/jobs', { name: 'first', ...nullPart({ environment: { DMS_NULL_FILES: files } }), outputs: [{ name: 'out', path: '/outputs' }], placement: { local: true } });
    expect(first.status, JSON.stringify(first.json)).toBe(201);
    const done = await waitFor('the first job completed', async () => {
      const j = (await rest(a, 'GET', `/api/v1/jobs/${first.json.id}`)).json as { status: string; outputs: { cid?: string }[] };
      return j.status === 'completed' ? j : undefined;
    });
    const cid = done.outputs[0].cid;
    expect(cid).toMatch(/^baf/);

    const reader = (extra: Record<string, unknown>) => ({ name: 'reads', parts: { reader: nullPart({ placement: { node: b.peerId }, ...extra }) } });
    const made = await rest(a, 'POST', '/api/v1/ensembles', reader({ inputs: [{ source: `job:${first.json.id}/out`, path: '/in' }] }));
    expect(made.status, JSON.stringify(made.json)).toBe(201);
    const part = partOf(made.json as Ensemble, 'reader');
    const job = (await rest(a, 'GET', `/api/v1/jobs/${part.job_id}`)).json as { inputs: { source: string; cid?: string }[] };
    expect(job.inputs).toEqual([{ source: `job:${first.json.id}/out`, path: '/in', cid }]);
    await rest(a, 'DELETE', `/api/v1/ensembles/${(made.json as Ensemble).id}`);

    const unknown = await rest(a, 'POST', '/api/v1/ensembles', reader({ inputs: [{ source: `job:${first.json.id}/nope`, path: '/in' }] }));
    expect(unknown.status).toBe(400);
    expect(unknown.json.error).toBe(`parts.reader.inputs: input job:${first.json.id}/nope: job ${first.json.id} has no collected output named nope`);

    expect((await rest(a, 'POST', '/api/v1/volumes', { name: 'data', size: '1MiB' })).status).toBe(201);
    const elsewhere = await rest(a, 'POST', '/api/v1/ensembles', reader({ inputs: [{ source: 'volume:data', path: '/v' }] }));
    expect(elsewhere.status).toBe(400);
    expect(elsewhere.json.error).toBe(`parts.reader.inputs: a part mounting volume:data runs on this node, where the volume is: pin it there (placement.node ${a.peerId})`);
    const missing = await rest(a, 'POST', '/api/v1/ensembles', { name: 'v', parts: { reader: nullPart({ placement: { node: a.peerId }, inputs: [{ source: 'volume:nope', path: '/v' }] }) } });
    expect(missing.status).toBe(400);
    expect(missing.json.error).toMatch(/^parts\.reader\.inputs: volume:nope: /);
  });

  it('refuses a spec with a bad part, naming it, and keeps nothing running', async () => {
    const bad = await rest(a, 'POST', '/api/v1/ensembles', { name: 'x', parts: { Web: nullPart({}) } });
    expect(bad.status).toBe(400);
    expect(bad.json.error).toMatch(/parts: key 'Web': part names are DNS labels/);
    const noExecutor = await rest(a, 'POST', '/api/v1/ensembles', { name: 'x', parts: { web: nullPart({ executor: 'nope' }) } });
    expect(noExecutor.status).toBe(400);
    expect(noExecutor.json.error).toMatch(/part web: executor: no executor named "nope"/);
  });
  it('keeps a part near another: only a node within max_rtt_ms of its node takes it', async () => {
    // No round trip between two nodes is under a microsecond: only the server's own node (0 ms) is near enough.
    const made = await rest(a, 'POST', '/api/v1/ensembles', {
      name: 'close',
      parts: {
        server: nullPart({ kind: 'service', environment: { DMS_NULL_DURATION_MS: '60000' }, placement: { node: c.peerId } }),
        client: nullPart({ environment: { DMS_NULL_DURATION_MS: '60000' }, near: { part: 'server', max_rtt_ms: 0.001 } }),
      },
    });
    expect(made.status, JSON.stringify(made.json)).toBe(201);
    const id = (made.json as Ensemble).id;
    const running = await until(id, 'running');
    expect(partOf(running, 'client').node).toBe(c.peerId);
    // The requester's own bid said how far it is from c, and was declined for it.
    const events = (await rest(a, 'GET', `/api/v1/jobs/${partOf(running, 'client').job_id}/events`)).json as { events: { reason: string }[] };
    expect(events.events.some((e) => e.reason === `placed on node ${c.peerId}`)).toBe(true);
    await rest(a, 'DELETE', `/api/v1/ensembles/${id}`);
    await waitFor('nothing held on c', async () => (await held(c)) === 0, { timeoutMs: 10_000 });
  });

  it('bounds the ensembles a node drives at once (ensembles.max_live)', async () => {
    const small = await startLocalNode({ config: { ensembles: { max_live: 2 } } });
    onTestFinished(async () => void (await small.stop()));
    // Parts that wait for a node that never comes: their ensembles stay live.
    const waiting = { name: 'w', parts: { p: nullPart({ placement: { labels: { nowhere: 'x' } } }) } };
    const ids: string[] = [];
    for (let i = 0; i < 2; i++) {
      const r = await rest(small, 'POST', '/api/v1/ensembles', waiting);
      expect(r.status).toBe(201);
      ids.push((r.json as Ensemble).id);
    }
    const refused = await rest(small, 'POST', '/api/v1/ensembles', waiting);
    expect(refused.status).toBe(503);
    expect(refused.json.error).toMatch(/drives 2 ensembles not yet ended, as many as ensembles\.max_live allows \(2\)/);
    // One ended makes room for the next.
    expect((await rest(small, 'DELETE', `/api/v1/ensembles/${ids[0]}`)).status).toBe(200);
    expect((await rest(small, 'POST', '/api/v1/ensembles', waiting)).status).toBe(201);
  });

  it('bounds ensembles submitted together too (ensembles.max_live)', async () => {
    // Each submit checked the bound, then waited on its row and its parts' jobs before it
    // counted: ten at once against max_live 2 made seven live ensembles on a node process.
    const small = await startLocalNode({ config: { ensembles: { max_live: 2 } } });
    onTestFinished(async () => void (await small.stop()));
    const waiting = { name: 'w', parts: { p: nullPart({ placement: { labels: { nowhere: 'x' } } }) } };
    const answers = await Promise.all(Array.from({ length: 8 }, () => rest(small, 'POST', '/api/v1/ensembles', waiting)));
    expect(answers.map((r) => r.status).sort()).toEqual([201, 201, 503, 503, 503, 503, 503, 503]);
    const live = ((await rest(small, 'GET', '/api/v1/ensembles')).json as Ensemble[]).filter((e) => e.status === 'pending' || e.status === 'running');
    expect(live).toHaveLength(2);
  });

  it('holds at most 8 MiB of ensembles a list page, and X-Total-Count says how many there are', { timeout: 120_000 }, async () => {
    // As the jobs list did: 100 ensembles of ~1 MiB specs made one page a 100 MB body.
    const node = await startLocalNode();
    onTestFinished(async () => void (await node.stop()));
    // Each just under the body limit (1 MiB), waiting for a node that never comes: twelve are 10.4 MiB.
    // In arguments of 127 KiB: one argument may be at most 128 KiB (Linux's MAX_ARG_STRLEN).
    const big = { name: 'big', parts: { p: nullPart({ command: ['echo', ...Array.from({ length: 7 }, () => 'x'.repeat(127 * 1024))], placement: { labels: { nowhere: 'x' } } }) } };
    for (let i = 0; i < 12; i++) expect((await rest(node, 'POST', '/api/v1/ensembles', big)).status).toBe(201);
    const page = async (query: string) => {
      const res = await fetch(`${node.url}/api/v1/ensembles?${query}`);
      expect(res.status).toBe(200);
      return { ids: ((await res.json()) as Ensemble[]).map((e) => e.id), total: res.headers.get('x-total-count') };
    };
    const first = await page('limit=100');
    expect(first.total).toBe('12');
    expect(first.ids.length).toBeGreaterThanOrEqual(1);
    expect(first.ids.length).toBeLessThanOrEqual(9);
    // Paged on by the count received, every ensemble comes once.
    const seen = [...first.ids];
    while (seen.length < 12) {
      const next = await page(`limit=100&offset=${seen.length}`);
      expect(next.ids.length).toBeGreaterThan(0);
      seen.push(...next.ids);
    }
    expect(new Set(seen).size).toBe(12);
    // Below the bound a page is as long as its limit.
    expect((await page('limit=3')).ids).toHaveLength(3);
  });

  it("places a lost node's part again alone, on another node, while the others run on", async () => {
    const d = await startLocalNode({ env: { DMS_NETWORK_BOOTSTRAP_PEERS: listenAddr(a) } });
    try {
      for (const n of [c, d]) expect((await rest(n, 'PUT', '/api/v1/device/config', { onboarded: { cpu: 1, memory: '1GiB' }, labels: { zone: 'lab' } })).status).toBe(200);
      const made = await rest(a, 'POST', '/api/v1/ensembles', {
        name: 'moving',
        parts: {
          // Only c and d have the label: the server runs on one, and goes to the other when it is lost.
          server: nullPart({ kind: 'service', environment: { DMS_NULL_DURATION_MS: '60000' }, placement: { labels: { zone: 'lab' } } }),
          client: nullPart({ kind: 'service', environment: { DMS_NULL_DURATION_MS: '60000' }, placement: { node: b.peerId } }),
        },
      });
      expect(made.status, JSON.stringify(made.json)).toBe(201);
      const id = (made.json as Ensemble).id;
      const running = await until(id, 'running');
      const first = partOf(running, 'server').node;
      expect([c.peerId, d.peerId]).toContain(first);
      const clientJob = partOf(running, 'client').job_id;
      await (first === c.peerId ? c : d).stop();
      const moved = await waitFor('the server running on the other labelled node', async () => {
        const e = await ensemble(id);
        const server = partOf(e, 'server');
        return server.status === 'running' && server.node !== first ? e : undefined;
      }, { timeoutMs: 40_000 });
      expect(partOf(moved, 'server').node).toBe(first === c.peerId ? d.peerId : c.peerId);
      // The client was never touched: the same job, running all along.
      expect(partOf(moved, 'client')).toMatchObject({ job_id: clientJob, status: 'running' });
      expect(moved.status).toBe('running');
      // A second round placed the server alone.
      expect(moved.attempts).toBe(2);
      expect((await rest(a, 'DELETE', `/api/v1/ensembles/${id}`)).json).toMatchObject({ status: 'failed', reason: 'cancelled' });
    } finally {
      await d.stop();
    }
  });
  it('places all or nothing: a lease refused for one part lets go of every other lease', async () => {
    // Nodes of their own: the leases let go here count against node a at its providers (a
    // minute's bar after four), which would decide the other tests instead.
    // Node f holds at most one unstarted lease per requester: of the two parts pinned there, the
    // second lease is refused every round, after every part was bid for.
    const [e, f] = await Promise.all(
      [{}, { deployment: { max_unstarted_leases: 1 } }].map((config) => startLocalNode({ config, env: { DMS_NETWORK_BOOTSTRAP_PEERS: listenAddr(a) } })),
    );
    onTestFinished(() => stopCluster([e, f]));
    for (const n of [e, f]) expect((await rest(n, 'PUT', '/api/v1/device/config', { onboarded: { cpu: 1, memory: '1GiB' } })).status).toBe(200);
    const made = await rest(a, 'POST', '/api/v1/ensembles', {
      name: 'too-much',
      parts: {
        fits: nullPart({ environment: { DMS_NULL_DURATION_MS: '60000' }, placement: { node: e!.peerId } }),
        one: nullPart({ resources: { cpu: 0.4, memory: '16MiB' }, environment: { DMS_NULL_DURATION_MS: '60000' }, placement: { node: f!.peerId } }),
        two: nullPart({ resources: { cpu: 0.4, memory: '16MiB' }, environment: { DMS_NULL_DURATION_MS: '60000' }, placement: { node: f!.peerId } }),
      },
    });
    expect(made.status, JSON.stringify(made.json)).toBe(201);
    const id = (made.json as Ensemble).id;
    const waiting = await waitFor('the ensemble waiting, naming the refused lease', async () => {
      const now = await ensemble(id);
      return now.reason?.startsWith('waiting for nodes:') ? now : undefined;
    }, { timeoutMs: 20_000 });
    expect(waiting.status).toBe('pending');
    expect(waiting.reason).toMatch(/part (one|two): .*holds 1 reservations here not yet started/);
    // No part ever ran, and between rounds nothing is held for it: the lease each round got on
    // e is let go when f refuses (left alone it would be held for its 10 s, round after round).
    let free = 0;
    for (let i = 0; i < 10; i++) {
      const now = await ensemble(id);
      expect(now.parts.every((p) => p.status === 'pending')).toBe(true);
      if ((await held(e!)) === 0) free++;
      await sleep(200);
    }
    expect(free).toBeGreaterThanOrEqual(5);
    const cancelled = (await rest(a, 'DELETE', `/api/v1/ensembles/${id}`)).json as Ensemble;
    expect(cancelled).toMatchObject({ status: 'failed', reason: 'cancelled' });
    expect(cancelled.parts.every((p) => p.status === 'failed')).toBe(true);
    await waitFor('nothing held on a, e and f', async () => (await held(a)) === 0 && (await held(e!)) === 0 && (await held(f!)) === 0, { timeoutMs: 15_000 });
  });

});
