/**
 * The `ensemble-net` actor with a Docker engine that accepts connections and never answers
 * (found in review): what an earlier run left is looked at in the background, and every attach
 * waited for that look, so one hung request held every ensemble part's start on the node for
 * good, even once the engine answered again. Here an attach fails in bounded time naming the
 * engine, a later one looks again, and once the engine answers the part is attached.
 *
 * The actor runs in the test's process against a stand-in engine on a unix socket: while
 * `hung` it holds every request unanswered; otherwise it answers the few network calls an
 * attach makes.
 */
import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, type ServerResponse } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Docker from 'dockerode';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { EnsembleNetActor } from '../../actors/ensembles/network.js';
import { ENSEMBLE_NET_INBOX, EnsembleAttachReply, EnsembleMembersReply, EnsembleNetBehaviors } from '../../behaviors/ensembles/schema.js';
import type { Actor } from '../../runtime/actor.js';
import { makeActor } from '../../runtime/component.js';
import { KeyPair } from '../../runtime/crypto/keys.js';
import { silentLogger } from '../../runtime/log.js';
import { ActorSystem } from '../../runtime/system.js';
import { testActor } from '../helpers/actor.js';

/** How long the actor waits for one answer of the engine here. */
const ANSWER_MS = 1_000;
/** An attach that fails past this was held by the engine, not bounded. */
const BOUNDED_MS = 4_000;

/** A stand-in engine: a network made is answered with a fixed subnet. */
class Engine {
  hung = true;
  /** Requests held unanswered, and every request seen ("METHOD path"). */
  readonly held = new Set<ServerResponse>();
  readonly seen: string[] = [];
  private readonly networks = new Set<string>();
  readonly dir = mkdtempSync(join(tmpdir(), 'dms-hung-engine-'));
  readonly socketPath = join(this.dir, 'docker.sock');
  private readonly server = createServer((req, res) => {
    this.seen.push(`${req.method} ${req.url}`);
    if (this.hung) {
      this.held.add(res);
      res.on('close', () => this.held.delete(res));
      return;
    }
    let body = '';
    req.on('data', (c: Buffer) => (body += c.toString()));
    req.on('end', () => this.answer(req.method ?? '', new URL(req.url ?? '/', 'http://engine').pathname, body, res));
  });

  listen(): Promise<void> {
    return new Promise((resolve) => this.server.listen(this.socketPath, resolve));
  }

  close(): void {
    for (const res of this.held) res.destroy();
    this.server.closeAllConnections();
    this.server.close();
    rmSync(this.dir, { recursive: true, force: true });
  }

  private answer(method: string, path: string, body: string, res: ServerResponse): void {
    const json = (status: number, value: unknown): void => void res.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify(value));
    const name = decodeURIComponent(/^(?:\/v[\d.]+)?\/networks\/([^/]+)$/.exec(path)?.[1] ?? '');
    if (method === 'GET' && /^(?:\/v[\d.]+)?\/networks$/.test(path)) return json(200, []);
    if (method === 'POST' && path.endsWith('/networks/create')) {
      const made = (JSON.parse(body) as { Name: string }).Name;
      this.networks.add(made);
      return json(201, { Id: made });
    }
    if (method === 'GET' && name) {
      if (!this.networks.has(name)) return json(404, { message: `network ${name} not found` });
      return json(200, { Name: name, Id: name, IPAM: { Config: [{ Subnet: '10.213.0.0/24', Gateway: '10.213.0.1' }] }, Containers: {} });
    }
    if (method === 'DELETE' && name) {
      this.networks.delete(name);
      return void res.writeHead(204).end();
    }
    json(404, { message: `no ${method} ${path} here` });
  }
}

describe('ensemble-net with a Docker engine that never answers', { timeout: 30_000 }, () => {
  let engine: Engine;
  let system: ActorSystem;
  let caller: Actor;

  beforeAll(async () => {
    engine = new Engine();
    await engine.listen();
    system = new ActorSystem({ key: KeyPair.generate(), log: silentLogger(), mailbox: { capacity: 64, concurrency: 8 }, replayCapacity: 1000 });
    const net = await makeActor(system, EnsembleNetActor, { docker: new Docker({ socketPath: engine.socketPath }), idleMs: 10_000, maxConnections: 4, engineAnswerMs: ANSWER_MS });
    await net.start();
    caller = await testActor(system, { inbox: 'ensemble-net-test' });
  });

  afterAll(async () => {
    await system?.stop();
    engine?.close();
  });

  /** This node's own grant of one part, then its attach: how long it took, and its answer or error. */
  const attach = async () => {
    const ensemble = randomUUID();
    const job_id = randomUUID();
    const to = caller.local(ENSEMBLE_NET_INBOX);
    await caller.call(to, EnsembleNetBehaviors.members, { ensemble, version: 1, expires_at: Date.now() + 60_000, parts: [{ part: 'web', job_id, node: system.host, ports: [] }] }, EnsembleMembersReply);
    const began = performance.now();
    // Longer than BOUNDED_MS, so an attach held by the engine shows as one that took too long.
    const outcome = await caller.call(to, EnsembleNetBehaviors.attach, { job_id, ensemble, part: 'web', requester: null }, EnsembleAttachReply, { ttlMs: 10_000 }).then(
      (reply) => ({ reply }),
      (e: unknown) => ({ error: e instanceof Error ? e.message : String(e) }),
    );
    return { ms: performance.now() - began, ...outcome };
  };

  it('fails an attach in bounded time naming the engine, looks again at the next, and attaches once the engine answers', async () => {
    const first = await attach();
    expect(first, 'an attach while the engine holds its look at what an earlier run left').toMatchObject({ error: expect.stringMatching(/Docker engine/) });
    expect(first.ms).toBeLessThan(BOUNDED_MS);
    expect(engine.seen.some((r) => r.startsWith('GET /networks?')), 'the engine was asked for the networks an earlier run left').toBe(true);

    const asked = engine.seen.length;
    const second = await attach();
    expect(second).toMatchObject({ error: expect.stringMatching(/Docker engine/) });
    expect(second.ms).toBeLessThan(BOUNDED_MS);
    expect(engine.seen.length, 'a later attach asks the engine again').toBeGreaterThan(asked);

    engine.hung = false;
    const third = await attach();
    expect(third).toMatchObject({ reply: { networks: [expect.stringMatching(/^dms-ens-/)], extra_hosts: [] } });
  });

  it('fails an attach in bounded time when the engine stops answering after it answered', async () => {
    engine.hung = false;
    expect(await attach()).toMatchObject({ reply: { networks: [expect.stringMatching(/^dms-ens-/)] } });
    engine.hung = true;
    const held = await attach();
    expect(held).toMatchObject({ error: expect.stringMatching(/Docker engine/) });
    expect(held.ms).toBeLessThan(BOUNDED_MS);
    engine.hung = false;
    expect(await attach()).toMatchObject({ reply: { networks: [expect.stringMatching(/^dms-ens-/)] } });
  });
});
