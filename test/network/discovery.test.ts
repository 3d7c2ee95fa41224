// The discovery actor's per-peer machines on real libp2p hosts in this process, on loopback:
// each step of a peer is a `transition` event on the node's system events.
import { afterEach, describe, expect, it } from 'vitest';
import { Discovery, type DiscoveryDeps } from '../../actors/discovery.js';
import { RootActor } from '../../actors/root.js';
import { makeActor } from '../../runtime/component.js';
import { KeyPair } from '../../runtime/crypto/keys.js';
import { silentLogger } from '../../runtime/log.js';
import { Libp2pTransport } from '../../runtime/network/libp2p-transport.js';
import { GREETED_SCORE } from '../../runtime/network/score.js';
import { ActorSystem, type SystemEvent } from '../../runtime/system.js';
import { freePort, waitFor } from '../helpers/network.js';

type Transition = Extract<SystemEvent, { type: 'transition' }>;

const running: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const stop of running.splice(0).reverse()) await stop();
});

/** A node with a kernel, a root actor and discovery, listening on `listen`; every system event is kept. */
async function startNode(opts: { key?: KeyPair; listen?: string } & Omit<DiscoveryDeps, 'network' | 'aliases'> = {}) {
  const { key = KeyPair.generate(), listen = '/ip4/127.0.0.1/tcp/0', ...deps } = opts;
  const system = new ActorSystem({ key, log: silentLogger(), mailbox: { capacity: 64, concurrency: 8 }, replayCapacity: 1_000 });
  const events: SystemEvent[] = [];
  system.events.subscribe((e) => events.push(e));
  const transport = await Libp2pTransport.create({ keyPair: key, listen: [listen], log: silentLogger() });
  system.attachTransport(transport);
  const rootComponent = await makeActor(system, RootActor, {});
  await rootComponent.start();
  const root = rootComponent.actor;
  const discovery = await makeActor(system, Discovery, { ...deps, network: transport, aliases: [root] });
  await discovery.start();
  const stop = async () => {
    await discovery.stop();
    await system.stop();
  };
  running.push(stop);
  const peerTransitions = () => events.filter((e): e is Transition => e.type === 'transition' && e.actor === 'discovery' && e.machine === 'peer');
  const view = (peer: string) => discovery.api.peers().find((p) => p.peer === peer);
  return { key, system, transport, discovery, events, peerTransitions, view, stop };
}

const connected = (state: string) => state.startsWith('connected');

describe('discovery peer machines', () => {
  it("a bootstrap peer's machine goes dialing → connected → greeted, each step a transition event on both nodes", async () => {
    const a = await startNode();
    const b = await startNode({ bootstrap: [a.transport.addrs()[0]] });

    await waitFor('b to greet a', () => b.view(a.key.peerId)?.state === 'connected.greeted');
    // Nested states by their dotted path: `connected.hello`.
    const seen = b.peerTransitions().map(({ from, to, from_path, to_path }) => [from_path ?? from, to_path ?? to]);
    expect(seen.slice(0, 2)).toEqual([
      ['(start)', 'dialing'],
      ['dialing', 'connected.hello'],
    ]);
    expect(seen).toContainEqual(['connected.hello', 'connected.greeted']);
    expect(b.view(a.key.peerId)).toMatchObject({ did: a.key.did, bootstrap: true, failures: 0 });

    // a did not dial b: its machine for b starts connected, and greets b back.
    await waitFor('a to greet b', () => a.view(b.key.peerId)?.state === 'connected.greeted');
    expect(a.peerTransitions()[0]).toMatchObject({ from: '(start)', to: 'connected', to_path: 'connected.hello' });
    expect(a.view(b.key.peerId)).toMatchObject({ did: b.key.did, bootstrap: false });
    expect(a.discovery.api.knownDids()).toEqual({ [b.key.peerId]: b.key.did });

    // An ordinary peer's machine ends when it leaves; a bootstrap peer's waits for libp2p's redial.
    await b.stop();
    await waitFor("a's machine for b to end", () => a.peerTransitions().some((t) => t.to === 'gone'));
    expect(a.view(b.key.peerId)).toBeUndefined();
    expect(a.discovery.api.knownDids()).toEqual({});
  });

  it('a peer that completed the hello is scored up by gossipsub, both ways (runtime/network/score.ts)', async () => {
    const scoreOf = (t: Libp2pTransport, peer: string): number => (t.node.services.pubsub as unknown as { getScore(p: string): number }).getScore(peer);
    const a = await startNode();
    const b = await startNode({ bootstrap: [a.transport.addrs()[0]] });
    await waitFor('b to greet a', () => b.view(a.key.peerId)?.state === 'connected.greeted');
    await waitFor('b to score a up for the hello', () => scoreOf(b.transport, a.key.peerId) === GREETED_SCORE, { timeoutMs: 10_000, intervalMs: 50 });
    await waitFor('a to score b up for the hello', () => scoreOf(a.transport, b.key.peerId) === GREETED_SCORE, { timeoutMs: 10_000, intervalMs: 50 });
  });

  it('a bootstrap peer that is down is redialled with a capped backoff, and joined once it comes up', async () => {
    const aKey = KeyPair.generate();
    const aListen = `/ip4/127.0.0.1/tcp/${await freePort()}`;
    const limits = { redialMinMs: 20, redialMaxMs: 100 };
    const b = await startNode({ bootstrap: [`${aListen}/p2p/${aKey.peerId}`], limits });

    // Nobody listens there yet: every dial fails, and the delay doubles up to its cap.
    await waitFor('six failed dials', () => (b.view(aKey.peerId)?.failures ?? 0) >= 6);
    // 20 ms × 2^5 is past the cap whatever the jitter (×0.75 to ×1.25): the delay is the cap.
    expect(b.view(aKey.peerId)?.retryMs).toBe(limits.redialMaxMs);
    const steps = b.peerTransitions().map(({ from, to, from_path, to_path }) => `${from_path ?? from} → ${to_path ?? to}`);
    expect(steps.filter((s) => s === 'dialing → backoff').length).toBeGreaterThanOrEqual(6);
    expect(steps.filter((s) => s === 'backoff → dialing').length).toBeGreaterThanOrEqual(5);
    expect(steps.some((s) => s.includes('connected'))).toBe(false);

    // It comes up at that address with that key: the next redial reaches it.
    await startNode({ key: aKey, listen: aListen });
    await waitFor('b to greet a', () => b.view(aKey.peerId)?.state === 'connected.greeted');
    expect(b.peerTransitions().some((t) => t.from === 'dialing' && connected(t.to))).toBe(true);
    expect(b.view(aKey.peerId)).toMatchObject({ did: aKey.did, failures: 0, retryMs: 0 });
  });

  it('a lost bootstrap peer is redialled by libp2p (its keep-alive tag), not by the machine', async () => {
    const aKey = KeyPair.generate();
    const aListen = `/ip4/127.0.0.1/tcp/${await freePort()}`;
    const a = await startNode({ key: aKey, listen: aListen });
    const b = await startNode({ bootstrap: [`${aListen}/p2p/${aKey.peerId}`] });
    await waitFor('b to greet a', () => b.view(aKey.peerId)?.state === 'connected.greeted');
    const before = b.peerTransitions().length;

    await a.stop();
    await waitFor('b to see a go', () => b.view(aKey.peerId)?.state === 'reconnecting');
    await startNode({ key: aKey, listen: aListen });
    await waitFor('b to greet a again', () => b.view(aKey.peerId)?.state === 'connected.greeted');
    const steps = b.peerTransitions().slice(before).map(({ from, to, from_path, to_path }) => `${from_path ?? from} → ${to_path ?? to}`);
    expect(steps[0]).toBe('connected.greeted → reconnecting');
    expect(steps[1]).toBe('reconnecting → connected.hello');
    expect(steps.some((s) => s.includes('dialing'))).toBe(false);
  });
});
