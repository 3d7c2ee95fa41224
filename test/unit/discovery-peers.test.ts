// The discovery actor's bounds on a fake network: how many peers it follows, how often it
// says hello, how it takes a bootstrap peer back from libp2p, and the redial delays.
import { describe, expect, it, onTestFinished } from 'vitest';
import { Discovery, type DiscoveryDeps, type PeerNetwork } from '../../actors/discovery.js';
import { RootActor } from '../../actors/root.js';
import { type PeerLimits, redialDelay } from '../../actors/peer-machine.js';
import { DeviceBehaviors, RESOURCES_INBOX, ResourceBehaviors } from '../../behaviors/jobs/resources.js';
import { emptyHandle } from '../../runtime/actor.js';
import { defineBehavior } from '../../runtime/behavior.js';
import { makeActor } from '../../runtime/component.js';
import { KeyPair } from '../../runtime/crypto/keys.js';
import { DmsError } from '../../runtime/errors.js';
import { silentLogger } from '../../runtime/log.js';
import type { PeerHandler } from '../../runtime/network/libp2p-transport.js';
import { ActorSystem, type SystemEvent } from '../../runtime/system.js';
import { waitFor } from '../helpers/network.js';
import { testActor } from '../helpers/actor.js';

/** A network whose peers and dials the test decides; it tells discovery what a transport would. */
function fakeNetwork() {
  const connected = new Set<string>();
  const dials: { address: string; keepAlive: boolean }[] = [];
  let peerHandler: PeerHandler = () => {};
  let giveUpHandler: (peer: string) => void = () => {};
  const state = { reachable: true };
  const peerOf = (address: string) => address.split('/p2p/')[1];
  const network: PeerNetwork = {
    addrs: () => [],
    peers: () => [...connected],
    ping: async () => 1,
    connect: async (address, opts) => {
      dials.push({ address, keepAlive: opts?.keepAlive === true });
      if (!state.reachable) throw new DmsError('unroutable', `cannot connect to ${address}: refused`);
      const peer = peerOf(address);
      if (!connected.has(peer)) {
        connected.add(peer);
        peerHandler({ peer, connected: true });
      }
      return peer;
    },
    onPeer: (h) => {
      peerHandler = h;
      return () => (peerHandler = () => {});
    },
    onReconnectFailure: (h) => {
      giveUpHandler = h;
      return () => (giveUpHandler = () => {});
    },
  };
  return {
    network,
    dials,
    state,
    connect: (peer: string) => {
      connected.add(peer);
      peerHandler({ peer, connected: true });
    },
    disconnect: (peer: string) => {
      connected.delete(peer);
      peerHandler({ peer, connected: false });
    },
    giveUp: (peer: string) => giveUpHandler(peer),
  };
}

/** Discovery on a kernel with no transport: every hello fails as unroutable, which is retried. */
async function startDiscovery(net: ReturnType<typeof fakeNetwork>, deps: Omit<DiscoveryDeps, 'network'>) {
  const system = new ActorSystem({ key: KeyPair.generate(), log: silentLogger(), mailbox: { capacity: 16, concurrency: 4 }, replayCapacity: 100 });
  const events: SystemEvent[] = [];
  system.events.subscribe((e) => events.push(e));
  const discovery = await makeActor(system, Discovery, { ...deps, network: net.network });
  // Stopped when the test ends, whatever its assertions did.
  onTestFinished(async () => {
    await discovery.stop();
    await system.stop();
  });
  await discovery.start();
  const steps = () => events.flatMap((e) => (e.type === 'transition' && e.machine === 'peer' ? [`${e.from_path ?? e.from} → ${e.to_path ?? e.to}`] : []));
  return { system, discovery, steps };
}

const peerIds = (n: number) => Array.from({ length: n }, () => KeyPair.generate().peerId);
const FAST: Partial<PeerLimits> = { redialMinMs: 1, redialMaxMs: 4, helloAttempts: 2, helloRetryMs: 1 };

describe('discovery bounds', () => {
  it('follows at most maxPeers ordinary peers, letting the oldest go, and says hello a bounded number of times', async () => {
    const net = fakeNetwork();
    const { discovery, steps } = await startDiscovery(net, { maxPeers: 3, limits: FAST });
    const peers = peerIds(5);
    for (const p of peers) net.connect(p);
    expect(discovery.api.peers().map((v) => v.peer)).toEqual(peers.slice(2));

    await waitFor('every followed peer to give up on hello', () => discovery.api.peers().every((v) => v.state === 'connected.ungreeted'));
    // Two attempts each: one retry per followed peer, and none for the two let go at once.
    expect(steps().filter((s) => s === 'connected.hello → connected.helloRetry')).toHaveLength(3);
    expect(steps().filter((s) => s === 'connected.helloRetry → connected.hello')).toHaveLength(3);
    expect(steps().filter((s) => s === 'connected.hello → connected.ungreeted')).toHaveLength(3);

    // An ordinary peer that leaves is forgotten; the freed place goes to the next one.
    net.disconnect(peers[3]);
    expect(steps()).toContain('connected.ungreeted → gone');
    const late = peerIds(1)[0];
    net.connect(late);
    expect(discovery.api.peers().map((v) => v.peer)).toEqual([peers[2], peers[4], late]);
  });

  it('takes a bootstrap peer back from libp2p when libp2p gives up redialling it', async () => {
    const net = fakeNetwork();
    const [peer] = peerIds(1);
    const address = `/ip4/127.0.0.1/tcp/4001/p2p/${peer}`;
    const { discovery, steps } = await startDiscovery(net, { bootstrap: [address], limits: FAST });
    await waitFor('the bootstrap peer to be dialled', () => discovery.api.peers()[0]?.state.startsWith('connected'));
    expect(net.dials).toEqual([{ address, keepAlive: true }]);

    // Lost: libp2p redials it (keep-alive), so the machine only waits.
    net.disconnect(peer);
    expect(discovery.api.peers()[0].state).toBe('reconnecting');
    expect(net.dials).toHaveLength(1);

    // libp2p gave up: the machine redials with its own backoff until the peer answers.
    net.state.reachable = false;
    net.giveUp(peer);
    await waitFor('three failed redials', () => discovery.api.peers()[0].failures >= 4);
    expect(discovery.api.peers()[0].retryMs).toBeLessThanOrEqual(FAST.redialMaxMs!);
    net.state.reachable = true;
    await waitFor('the peer to be connected again', () => discovery.api.peers()[0].state.startsWith('connected'));
    const after = steps().slice(steps().findIndex((s) => s.endsWith('→ reconnecting')));
    expect(after.slice(1, 3)).toEqual(['reconnecting → backoff', 'backoff → dialing']);
    expect(after).toContain('dialing → connected.hello');
    expect(net.dials.every((d) => d.keepAlive)).toBe(true);
    expect(discovery.api.peers()[0]).toMatchObject({ failures: 0, bootstrap: true });
  });

  it('never waits longer than redialMaxMs between redials, and doubles the wait until then', () => {
    const limits: PeerLimits = { redialMinMs: 1_000, redialMaxMs: 30_000, helloAttempts: 3, helloRetryMs: 1_000 };
    for (const random of [0, 0.5, 1]) {
      const delays = Array.from({ length: 60 }, (_, i) => redialDelay(limits, i + 1, random));
      expect(Math.max(...delays)).toBe(limits.redialMaxMs);
      for (let i = 1; i < delays.length; i++) expect(delays[i]).toBeGreaterThanOrEqual(delays[i - 1]);
      expect(delays[1]).toBe(Math.min(2 * delays[0], limits.redialMaxMs));
    }
    expect(redialDelay(limits, 1, 0)).toBe(750);
    expect(redialDelay(limits, 1, 1)).toBe(1_250);
  });
});

describe('discovery stopping', () => {
  it("a /public/describe still running on root when discovery stops ends, and does not hold root's stop", async () => {
    const system = new ActorSystem({ key: KeyPair.generate(), log: silentLogger(), mailbox: { capacity: 16, concurrency: 4 }, replayCapacity: 100 });
    onTestFinished(() => system.stop());
    const rootComponent = await makeActor(system, RootActor, {});
    await rootComponent.start();
    const root = rootComponent.actor;
    // A resource manager that answers only when the test lets it, so the describe is in flight.
    let asked = 0;
    let answer!: () => void;
    const gate = new Promise<void>((resolve) => (answer = resolve));
    const slow = (name: string) =>
      defineBehavior({
        name,
        handle: async () => {
          asked++;
          await gate;
          return {};
        },
      });
    await testActor(system, { inbox: RESOURCES_INBOX, behaviors: [slow(DeviceBehaviors.status), slow(ResourceBehaviors.usage)] });
    const discovery = await makeActor(system, Discovery, { aliases: [root], profile: { version: '1', executors: [], fallbackName: 'n' } });
    await discovery.start();

    const client = await testActor(system, { inbox: 'client' });
    const described = client.invoke<{ name: string }>({ ...emptyHandle(), addr: { host: '', inbox: 'root' } }, '/public/describe', {}, { unsigned: true });
    await waitFor('the describe to reach the resource manager', () => asked === 2);
    await discovery.stop();
    answer();
    expect((await described).payload.name).toBe('n');
  });
});
