/**
 * `<part>.internal` between an ensemble's parts (README "Names between parts"), with Docker and
 * three in-process nodes on real libp2p. Node A is the requester: it places hand-made part jobs
 * (`ensemble`/`part` in the start, as the ensemble actor will) through the deployment
 * behaviors, and grants the members to every node hosting a part by calling
 * `/dms/ensemble-net/members`. A busybox `httpd` part serves a page; a `wget` part fetches
 * `http://server.internal:8080/` (a) on the same node B, (b) from node C, through a tunnel
 * B lets in only because A's grant names C as a host of the ensemble. Then what must not work:
 * a part with no node or a port nothing listens on, a stranger's or a revoked grant, a part
 * nobody granted, a name pointed at another requester's job; and what must survive: two parts
 * on one port, a part moving, a node restarted under its parts, leftovers at start.
 */
import { randomUUID } from 'node:crypto';
import { peerIdFromString } from '@libp2p/peer-id';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { ENSEMBLE_NET_INBOX, EnsembleMembersReply, EnsembleNetBehaviors, type EnsembleMembers, PartBehaviors } from '../../behaviors/ensembles/schema.js';
import { ORCHESTRATOR_INBOX } from '../../behaviors/jobs/jobs.js';
import { DEPLOYMENT_INBOX, DeploymentBehaviors } from '../../behaviors/jobs/deployment.js';
import type { Actor } from '../../runtime/actor.js';
import type { Libp2pTransport } from '../../runtime/network/libp2p-transport.js';
import { openTunnel } from '../../runtime/network/tunnel.js';
import { at, decodePayload } from '../../runtime/wire/envelope.js';
import { testActor } from '../helpers/actor.js';
import { dockerForTests, TEST_IMAGE } from '../helpers/docker.js';
import { type LocalNode, startLocalNode } from '../helpers/local-node.js';
import { startCluster, stopCluster, waitFor } from '../helpers/network.js';
import { ForeignPeer } from '../helpers/peer.js';
import { DmsClient } from '../../client/client.js';
import { KeyPair } from '../../runtime/crypto/keys.js';

const { docker, problem } = await dockerForTests('ensemble names test');

const PAGE = 'served by the server part';
const HTTPD = ['sh', '-c', `mkdir -p /tmp/www && echo "${PAGE}" > /tmp/www/index.html && exec httpd -f -p 8080 -h /tmp/www`];
/** Shell that fetches `url`, trying for up to 15 s (the server part may start after the client); false when it never came. This busybox's wget crashes with -T. */
const retry = (url: string) => `ok=; for i in $(seq 1 30); do wget -q -O- ${url} && ok=1 && break; sleep 0.5; done; [ -n "$ok" ]`;
const FETCH = (url: string) => ['sh', '-c', retry(url)];
const resources = { cpu: { cores: 0.2 }, memory: { size: 32 * 1024 * 1024 }, storage: { size: 0 } };

describe.skipIf(problem !== null)('<part>.internal between the parts of an ensemble', { timeout: 120_000 }, () => {
  let a: LocalNode;
  let b: LocalNode;
  let c: LocalNode;
  let caller: Actor;
  let stranger: ForeignPeer | undefined;

  const hostOf = (n: LocalNode) => (n === a ? '' : n.peerId);
  const api = async (node: LocalNode, method: string, path: string, body?: unknown) => {
    const r = await fetch(`${node.url}${path}`, { method, headers: { 'content-type': 'application/json' }, body: body === undefined ? undefined : JSON.stringify(body) });
    return { status: r.status, body: (await r.json()) as Record<string, unknown> };
  };
  /** What the ensemble actor will do for one part: bid, reserve, start with its ensemble (the job id is the requester's, named in the grant). */
  /** Bids and reserves on `on` for job `id`, as the requester's deployment actor does. */
  const reserveOn = async (on: LocalNode, id: string) => {
    const to = at(DEPLOYMENT_INBOX, hostOf(on));
    await caller.call(to, DeploymentBehaviors.bid, { jobs: [{ job_id: id, resources, executor: 'docker' }] }, z.unknown());
    await caller.call(to, DeploymentBehaviors.reserve, { job_id: id, resources, lease_ms: 10_000 }, z.unknown());
  };
  const place = async (on: LocalNode, ensemble: string, part: string, command: string[], id: string, ports: number[] = []) => {
    await reserveOn(on, id);
    await caller.call(at(DEPLOYMENT_INBOX, hostOf(on)), DeploymentBehaviors.start, { job: { id, name: part, image: TEST_IMAGE, command, resources, ports, executor: 'docker', ensemble: { id: ensemble, part } } }, z.unknown());
  };
  /**
   * The same, with the part also held and assigned in A's orchestrator, as the ensemble actor
   * does: A then follows it, and answers the node that asks after a restart whether the part is
   * still wanted (actors/deployment/still-wanted.ts). One placed by hand alone is unknown to A, and
   * the node back from its restart stops it.
   */
  const placeFollowed = async (on: LocalNode, ensemble: string, part: string, command: string[], id: string, ports: number[] = []) => {
    await reserveOn(on, id);
    const orchestrator = caller.local(ORCHESTRATOR_INBOX);
    await caller.call(orchestrator, PartBehaviors.create, { ensemble, part, job_id: id, spec: { name: part, image: TEST_IMAGE, command, resources, ports, executor: 'docker' } }, z.unknown());
    await caller.call(orchestrator, PartBehaviors.assign, { job_id: id, node: on.peerId }, z.unknown());
  };
  const grant = (nodes: LocalNode[], members: EnsembleMembers) =>
    Promise.all(nodes.map((n) => caller.call(at(ENSEMBLE_NET_INBOX, hostOf(n)), EnsembleNetBehaviors.members, members, EnsembleMembersReply)));
  const ended = (on: LocalNode, id: string) =>
    waitFor(`job ${id} ended on ${on.peerId.slice(-6)}`, async () => {
      const j = (await api(on, 'GET', `/api/v1/jobs/${id}`)).body;
      return j.status === 'completed' || j.status === 'failed' ? j : undefined;
    }, { timeoutMs: 60_000, intervalMs: 250 });
  const logsOf = async (on: LocalNode, id: string) => ((await api(on, 'GET', `/api/v1/jobs/${id}/logs`)).body.chunks as { data: string }[]).map((c) => c.data).join('');
  const stop = (on: LocalNode, id: string) => caller.call(at(DEPLOYMENT_INBOX, hostOf(on)), DeploymentBehaviors.cancel, { id }, z.unknown(), { ttlMs: 60_000 });
  const networksOf = async (on: LocalNode) => (await docker.listNetworks({ filters: { label: [`dms.node=${on.peerId}`, 'dms.ensemble'] } })).map((n) => n.Name);

  beforeAll(async () => {
    // A second of stop grace: the httpd parts ignore SIGTERM (pid 1), and each test stops one.
    [a, b, c] = await startCluster(3, { start: startLocalNode, node: () => ({ config: { jobs: { stop_grace_s: 1 } } }) });
    for (const n of [b, c]) expect((await api(n, 'PUT', '/api/v1/device/config', { onboarded: { cpu: 1, memory: '1GiB' } })).status).toBe(200);
    caller = await testActor(a.node.system, { inbox: 'ensemble-test' });
  }, 60_000);

  afterAll(async () => {
    await stranger?.stop();
    for (const n of [a, b, c]) {
      if (!n) continue;
      const left = await docker.listContainers({ all: true, filters: { label: [`dms.node=${n.peerId}`] } });
      await Promise.all(left.map((c) => docker.getContainer(c.Id).remove({ force: true }).catch(() => undefined)));
    }
    await stopCluster([a, b, c]);
    for (const n of [a, b, c]) {
      if (!n) continue;
      const nets = await docker.listNetworks({ filters: { label: [`dms.node=${n.peerId}`] } });
      await Promise.all(nets.map((x) => docker.getNetwork(x.Id).remove().catch(() => undefined)));
    }
  });

  it('(a) a part reaches another on the same node by name, on an internal network of the ensemble', async () => {
    const ensemble = randomUUID();
    const serverId = randomUUID();
    const clientId = randomUUID();
    // The grant comes first, as the ensemble actor sends it before any start.
    // `ghost` has no node: its name resolves and its connection is refused, and nothing else minds.
    const ghost = { part: 'ghost', job_id: randomUUID(), node: null, ports: [9999] };
    // The server declares 8081 too, where nothing listens: that connection is refused the same way.
    await grant([b], { ensemble, version: 1, expires_at: Date.now() + 60_000, parts: [{ part: 'server', job_id: serverId, node: b.peerId, ports: [8080, 8081] }, { part: 'client', job_id: clientId, node: b.peerId, ports: [] }, ghost] });
    await place(b, ensemble, 'server', HTTPD, serverId, [8080, 8081]);
    const script = `wget -q -O- http://ghost.internal:9999/ && exit 3; echo ghost refused; ${retry('http://server.internal:8080/')} || exit 1; wget -q -O- http://server.internal:8081/ && exit 4; echo closed port refused`;
    await place(b, ensemble, 'client', ['sh', '-c', script], clientId);
    const done = await ended(b, clientId);
    const logs = await logsOf(b, clientId);
    expect(done.status, logs).toBe('completed');
    expect(logs).toContain('ghost refused');
    expect(logs).toContain(PAGE);
    expect(logs).toContain('closed port refused');
    const [net] = await networksOf(b);
    expect(net).toMatch(new RegExp(`^dms-ens-${ensemble}-[0-9a-f]{8}$`));
    expect((await docker.getNetwork(net!).inspect()).Internal).toBe(true);
    await stop(b, serverId);
    await waitFor('the ensemble network removed with its last part', async () => (await networksOf(b)).length === 0, { timeoutMs: 30_000 });
  });

  it('(b) a part reaches another on the other node by name, through a tunnel its grant opens', async () => {
    const ensemble = randomUUID();
    const serverId = randomUUID();
    const clientId = randomUUID();
    // Server on B, client on C, both placed by A: C's tunnel to B is let in by A's grant alone.
    await grant([b, c], { ensemble, version: 1, expires_at: Date.now() + 60_000, parts: [{ part: 'server', job_id: serverId, node: b.peerId, ports: [8080, 8081] }, { part: 'client', job_id: clientId, node: c.peerId, ports: [] }] });
    await place(b, ensemble, 'server', HTTPD, serverId, [8080, 8081]);
    const script = `${retry('http://server.internal:8080/')} || exit 1; wget -q -O- http://server.internal:8081/ && exit 4; echo closed port refused`;
    await place(c, ensemble, 'client', ['sh', '-c', script], clientId);
    const done = await ended(c, clientId);
    const logs = await logsOf(c, clientId);
    expect(done.status, logs).toBe('completed');
    expect(logs).toContain(PAGE);
    expect(logs).toContain('closed port refused');

    // A stranger granting itself the same ensemble id holds a grant of its own, which opens nothing of A's.
    stranger = await ForeignPeer.connectedTo(b);
    const forged = { ensemble, version: 99, expires_at: Date.now() + 60_000, parts: [{ part: 'server', job_id: serverId, node: stranger.host, ports: [8080] }] };
    await stranger.send(stranger.envelope(b, { be: EnsembleNetBehaviors.members, inbox: ENSEMBLE_NET_INBOX, cont: '/forged-reply', payload: forged }));
    expect(decodePayload((await stranger.waitReply('/forged-reply')).msg)).toMatchObject({ ensemble, version: 99, accepted: true });
    const bPeer = peerIdFromString(b.peerId);
    await expect(openTunnel(stranger.transport.node, bPeer, { job_id: serverId, port: 8080 })).rejects.toThrow(/nor a host of its ensemble/);
    // C, which A's grant names, is let in to the declared port only, and no longer once A revokes.
    const cNode = (c.node.system.network as Libp2pTransport).node;
    await expect(openTunnel(cNode, bPeer, { job_id: serverId, port: 9090 })).rejects.toThrow(/does not declare port 9090/);
    const open = await openTunnel(cNode, bPeer, { job_id: serverId, port: 8080 });
    open.stream.abort(new Error('done'));
    await caller.call(at(ENSEMBLE_NET_INBOX, b.peerId), EnsembleNetBehaviors.revoke, { ensemble }, z.unknown());
    await expect(openTunnel(cNode, bPeer, { job_id: serverId, port: 8080 })).rejects.toThrow(/nor a host of its ensemble/);
    // One line a minute per peer (C's second refusal goes unlogged and counted): the stranger's and C's.
    await waitFor("the refusals in node B's log", () => (b.logs().match(/tunnel refused/g) ?? []).length >= 2, { timeoutMs: 5_000 });
    expect((await api(b, 'GET', '/api/v1/jobs?limit=1')).status).toBe(200);
    await stop(b, serverId);
  });

  it('(c) gives two parts declaring the same port a network each, and reaches both by name', async () => {
    const ensemble = randomUUID();
    const [one, two, clientId] = [randomUUID(), randomUUID(), randomUUID()];
    const serve = (page: string) => ['sh', '-c', `mkdir -p /tmp/www && echo "${page}" > /tmp/www/index.html && exec httpd -f -p 8080 -h /tmp/www`];
    await grant([b], {
      ensemble,
      version: 1,
      expires_at: Date.now() + 60_000,
      parts: [{ part: 'one', job_id: one, node: b.peerId, ports: [8080] }, { part: 'two', job_id: two, node: b.peerId, ports: [8080] }, { part: 'client', job_id: clientId, node: b.peerId, ports: [] }],
    });
    await place(b, ensemble, 'one', serve('page one'), one, [8080]);
    await place(b, ensemble, 'two', serve('page two'), two, [8080]);
    await place(b, ensemble, 'client', ['sh', '-c', `${retry('http://one.internal:8080/')} && ${retry('http://two.internal:8080/')}`], clientId);
    const done = await ended(b, clientId);
    const logs = await logsOf(b, clientId);
    expect(done.status, logs).toBe('completed');
    expect(logs).toContain('page one');
    expect(logs).toContain('page two');
    expect((await networksOf(b)).sort()).toEqual([expect.stringMatching(new RegExp(`^dms-ens-${ensemble}-[0-9a-f]{8}$`)), expect.stringMatching(new RegExp(`^dms-ens-${ensemble}-[0-9a-f]{8}-1$`))]);
    await Promise.all([stop(b, one), stop(b, two)]);
    await waitFor('both networks removed with the last part', async () => (await networksOf(b)).length === 0, { timeoutMs: 30_000 });
  });

  it('(d) fails a part whose requester granted nothing, saying so, and makes no network for it', async () => {
    const id = randomUUID();
    await place(b, randomUUID(), 'lonely', ['true'], id);
    const done = await ended(b, id);
    expect(done.status).toBe('failed');
    expect(await logsOf(b, id)).toMatch(/no grant from requester \S+ lists job .* as part lonely/);
    expect(await networksOf(b)).toEqual([]);
    // A REST caller with a key of its own cannot grant as the node (its envelope names this node).
    const members = { ensemble: randomUUID(), version: 1, expires_at: Date.now() + 60_000, parts: [{ part: 'x', job_id: randomUUID(), node: b.peerId, ports: [] }] };
    const reply = await new DmsClient({ url: b.url, key: KeyPair.generate(), timeoutMs: 10_000 }).invoke({ inbox: ENSEMBLE_NET_INBOX }, EnsembleNetBehaviors.members, members, { raw: true }).catch((e: unknown) => ({ payload: String(e) }));
    expect(reply.payload).toEqual({ error: 'ensemble grants naming this node come from its own actors only', kind: 'forbidden' });
  });

  it("(e) a requester cannot point its part's name at another requester's job on the same node", async () => {
    const [ours, theirs] = [randomUUID(), randomUUID()];
    const [serverId, clientId] = [randomUUID(), randomUUID()];
    await grant([b], { ensemble: ours, version: 1, expires_at: Date.now() + 60_000, parts: [{ part: 'server', job_id: serverId, node: b.peerId, ports: [8080] }] });
    await place(b, ours, 'server', HTTPD, serverId, [8080]);
    await waitFor('the server running', async () => (await api(b, 'GET', `/api/v1/jobs/${serverId}`)).body.status === 'running', { timeoutMs: 30_000 });
    // C, another requester, names A's server job as a part of its own ensemble and places a client beside it.
    // Two checks hold it off, each enough (checked by removing both: the page came through): the
    // job must be attached here as that part of that ensemble, and reached on that ensemble's network.
    const hostile = await testActor(c.node.system, { inbox: 'hostile-requester' });
    const parts = [{ part: 'server', job_id: serverId, node: b.peerId, ports: [8080] }, { part: 'client', job_id: clientId, node: b.peerId, ports: [] }];
    await hostile.call(at(ENSEMBLE_NET_INBOX, b.peerId), EnsembleNetBehaviors.members, { ensemble: theirs, version: 1, expires_at: Date.now() + 60_000, parts }, EnsembleMembersReply);
    const to = at(DEPLOYMENT_INBOX, b.peerId);
    await hostile.call(to, DeploymentBehaviors.bid, { jobs: [{ job_id: clientId, resources, executor: 'docker' }] }, z.unknown());
    await hostile.call(to, DeploymentBehaviors.reserve, { job_id: clientId, resources, lease_ms: 10_000 }, z.unknown());
    const probe = 'sleep 1; wget -q -O- http://server.internal:8080/ && exit 3; echo refused';
    await hostile.call(to, DeploymentBehaviors.start, { job: { id: clientId, name: 'client', image: TEST_IMAGE, command: ['sh', '-c', probe], resources, executor: 'docker', ensemble: { id: theirs, part: 'client' } } }, z.unknown());
    const done = await ended(b, clientId);
    const logs = await logsOf(b, clientId);
    expect(done.status, logs).toBe('completed');
    expect(logs).toContain('refused');
    expect(logs).not.toContain(PAGE);
    expect((await api(b, 'GET', `/api/v1/jobs/${serverId}`)).body.status).toBe('running');
    await stop(b, serverId);
  });

  it('(f) a name follows its part when it moves to another node, read from the latest grant at each connection', async () => {
    const ensemble = randomUUID();
    const [first, moved, clientId] = [randomUUID(), randomUUID(), randomUUID()];
    const serve = (page: string) => ['sh', '-c', `mkdir -p /tmp/www && echo "${page}" > /tmp/www/index.html && exec httpd -f -p 8080 -h /tmp/www`];
    const parts = (server: string, node: string) => [{ part: 'server', job_id: server, node, ports: [8080] }, { part: 'client', job_id: clientId, node: c.peerId, ports: [] }];
    await grant([b, c], { ensemble, version: 1, expires_at: Date.now() + 60_000, parts: parts(first, b.peerId) });
    await place(b, ensemble, 'server', serve('first home'), first, [8080]);
    // The client fetches until it has seen the server's second home (at most 40 s).
    const loop = 'for i in $(seq 1 80); do wget -q -O- http://server.internal:8080/ 2>/dev/null | grep -q "second home" && echo followed && exit 0; sleep 0.5; done; exit 1';
    await place(c, ensemble, 'client', ['sh', '-c', `${retry('http://server.internal:8080/')} && ${loop}`], clientId);
    await waitFor('the client reaching the first home', async () => (await logsOf(c, clientId)).includes('first home'), { timeoutMs: 30_000 });
    // The server is placed again on C, the client's own node: the requester tells both nodes at once.
    await grant([b, c], { ensemble, version: 2, expires_at: Date.now() + 60_000, parts: parts(moved, c.peerId) });
    await place(c, ensemble, 'server', serve('second home'), moved, [8080]);
    await stop(b, first);
    const done = await ended(c, clientId);
    const logs = await logsOf(c, clientId);
    expect(done.status, logs).toBe('completed');
    expect(logs).toContain('followed');
    await stop(c, moved);
  });

  it('(g) removes the ensemble networks an earlier run left without containers when the node starts', async () => {
    const ensemble = randomUUID();
    const name = `dms-ens-${ensemble}-leftover`;
    await docker.createNetwork({ Name: name, Internal: true, Labels: { 'dms.node': c.peerId, 'dms.ensemble': ensemble, 'dms.ensemble.requester': a.peerId } });
    await c.stop();
    c = await startLocalNode({ home: c.home });
    expect(await networksOf(c)).toEqual([]);
  });

  it('(h) a node restarted under a running part keeps its network, and the names work again with the next grant', async () => {
    const ensemble = randomUUID();
    const [serverId, clientId] = [randomUUID(), randomUUID()];
    const parts = (client: string) => [{ part: 'server', job_id: serverId, node: b.peerId, ports: [8080] }, { part: 'client', job_id: client, node: b.peerId, ports: [] }];
    await grant([b], { ensemble, version: 1, expires_at: Date.now() + 60_000, parts: parts(clientId) });
    await placeFollowed(b, ensemble, 'server', HTTPD, serverId, [8080]);
    await waitFor('the server running', async () => (await api(b, 'GET', `/api/v1/jobs/${serverId}`)).body.status === 'running', { timeoutMs: 30_000 });
    const [before] = await networksOf(b);
    await b.stop();
    b = await startLocalNode({ home: b.home, env: { DMS_NETWORK_BOOTSTRAP_PEERS: '' } });
    expect(await networksOf(b)).toEqual([before]);
    // A reconnects (its ensemble actor renews every ~30 s; here at once), and a new client part uses the name.
    await (a.node.system.network as Libp2pTransport).connect(`${(b.node.system.network as Libp2pTransport).addrs()[0]}`);
    const next = randomUUID();
    await grant([b], { ensemble, version: 2, expires_at: Date.now() + 60_000, parts: parts(next) });
    await place(b, ensemble, 'client', FETCH('http://server.internal:8080/'), next);
    const done = await ended(b, next);
    const logs = await logsOf(b, next);
    expect(done.status, logs).toBe('completed');
    expect(logs).toContain(PAGE);
    await stop(b, serverId);
    await waitFor('the network removed with its last part', async () => (await networksOf(b)).length === 0, { timeoutMs: 30_000 });
  });
});
