import { describe, expect, it } from 'vitest';
import { PeerProfiles } from '../../actors/peer-profiles.js';
import { NodeProfile } from '../../behaviors/discovery.js';

const spec = { cpu: { cores: 2 }, memory: { size: 1024 }, storage: { size: 0 } };
const profile = (over: Record<string, unknown> = {}) => ({
  name: 'a',
  version: '0.1.0',
  addrs: ['/ip4/127.0.0.1/tcp/1/p2p/x'],
  location: {},
  onboarded: spec,
  free: spec,
  executors: ['null'],
  ...over,
});

describe('NodeProfile: what a peer may make this node keep', () => {
  it('accepts a profile and refuses every unbounded part', () => {
    expect(NodeProfile.safeParse(profile()).success).toBe(true);
    for (const bad of [
      { name: 'x'.repeat(201) },
      { executors: Array.from({ length: 17 }, (_, i) => `e${i}`) },
      { addrs: Array.from({ length: 9 }, () => '/ip4/1.2.3.4/tcp/1') },
      { location: { city: 'x'.repeat(101) } },
      // The shared resource schema leaves a GPU model open; the byte cap closes it.
      { onboarded: { ...spec, gpu: { count: 1, model: 'x'.repeat(9000) } } },
      { secret: 'extra field' },
    ]) {
      expect(NodeProfile.safeParse(profile(bad)).success, JSON.stringify(bad).slice(0, 80)).toBe(false);
    }
  });
});

describe('PeerProfiles', () => {
  const make = (ask: (peer: string) => Promise<unknown>, connected = () => true) =>
    new PeerProfiles({ ask, connected, freshMs: 60_000, waitMs: 200, log: () => undefined });

  it('a reader waits at most waitMs for a peer that does not answer', async () => {
    const profiles = make(() => new Promise(() => undefined));
    const started = Date.now();
    await profiles.refreshStale(['p']);
    // The answer never comes: returning at all shows the bound; the margin over waitMs is for a loaded machine.
    expect(Date.now() - started).toBeLessThan(10_000);
    expect(profiles.get('p')).toEqual({ profile: null, last_seen: null });
  });

  it('keeps the last good profile when a later answer is invalid, and nothing of a peer that left', async () => {
    let answer: unknown = profile({ name: 'first' });
    let connected = true;
    const profiles = make(async () => answer, () => connected);
    await profiles.refresh('p');
    expect(profiles.get('p').profile?.name).toBe('first');
    answer = { name: 42 };
    await profiles.refresh('p');
    expect(profiles.get('p').profile?.name).toBe('first');
    connected = false;
    profiles.forget('p');
    answer = profile({ name: 'late' });
    await profiles.refresh('p');
    expect(profiles.get('p').profile).toBeNull();
  });
});

describe('PeerProfiles: a reader about to act asks after it began', () => {
  /** A peer whose answers the test releases: each question gets the profile current when it was asked. */
  function slowPeer() {
    let current = profile({ onboarded: null });
    const waiting: (() => void)[] = [];
    let asked = 0;
    const ask = (_peer: string) => {
      asked++;
      const answer = current;
      return new Promise<unknown>((resolve) => waiting.push(() => resolve(answer)));
    };
    return {
      ask,
      onboard: () => (current = profile()),
      answerAll: () => waiting.splice(0).forEach((answer) => answer()),
      asked: () => asked,
    };
  }
  const make = (ask: (peer: string) => Promise<unknown>) => new PeerProfiles({ ask, connected: () => true, freshMs: 60_000, waitMs: 5_000, log: () => undefined });
  const turns = () => new Promise((r) => setImmediate(r));

  it('does not take the answer to a question asked before it began', async () => {
    const peer = slowPeer();
    const profiles = make(peer.ask);
    // Asked on connect, before the peer onboarded its share; the answer is still on its way.
    const onConnect = profiles.refresh('p');
    peer.onboard();
    const read = profiles.refreshStale(['p'], ['p']);
    peer.answerAll();
    await onConnect;
    await turns();
    expect(peer.asked()).toBe(2);
    peer.answerAll();
    await read;
    expect(profiles.get('p').profile?.onboarded).toEqual(spec);
  });

  it('asks a peer at most twice at a time, however many readers come', async () => {
    const peer = slowPeer();
    const profiles = make(peer.ask);
    const first = profiles.refresh('p');
    const reads = Array.from({ length: 20 }, () => profiles.refreshStale(['p'], ['p']));
    peer.answerAll();
    await first;
    await turns();
    peer.answerAll();
    await Promise.all(reads);
    expect(peer.asked()).toBe(2);
    // Nothing on its way now: the next reader asks at once.
    const again = profiles.refreshStale(['p'], ['p']);
    expect(peer.asked()).toBe(3);
    peer.answerAll();
    await again;
  });

  it('asks a peer that said its profile changed again on the next read, however fresh the copy', async () => {
    const peer = slowPeer();
    const profiles = make(peer.ask);
    const first = profiles.refresh('p');
    peer.answerAll();
    await first;
    // Fresh for a minute: an ordinary read does not ask.
    await profiles.refreshStale(['p']);
    expect(peer.asked()).toBe(1);
    peer.onboard();
    profiles.outdated('p');
    const read = profiles.refreshStale(['p']);
    expect(peer.asked()).toBe(2);
    peer.answerAll();
    await read;
    expect(profiles.get('p').profile?.onboarded).toEqual(spec);
    // Answered after the change: fresh again.
    await profiles.refreshStale(['p']);
    expect(peer.asked()).toBe(2);
  });

  it('does not take a question on its way when the peer said its profile changed as the reader came', async () => {
    const peer = slowPeer();
    const profiles = make(peer.ask);
    await Promise.all([profiles.refresh('p'), Promise.resolve().then(peer.answerAll)]);
    // Another reader's question is out, asked before the change; then the peer says it changed.
    const before = profiles.refresh('p');
    peer.onboard();
    profiles.outdated('p');
    const read = profiles.refreshStale(['p']);
    peer.answerAll();
    await before;
    await turns();
    expect(peer.asked()).toBe(3);
    peer.answerAll();
    await read;
    expect(profiles.get('p').profile?.onboarded).toEqual(spec);
  });

  it('takes word of a change only for a peer it keeps a copy of', async () => {
    const peer = slowPeer();
    const profiles = make(peer.ask);
    profiles.outdated('unknown');
    expect(profiles.get('unknown')).toEqual({ profile: null, last_seen: null });
  });
});
