/**
 * Hostile soak of placement (issue 26): for DMS_SOAK_SECONDS (default 60) one hostile libp2p
 * peer runs the three high attacks in a loop against a provider process (over-commit through a
 * start larger than its lease; holding the share with leases renewed, reserved from the topic
 * and re-taken; filling the replay cache with throwaway keys over its one connection), while a
 * genuine node places 100 null jobs on that provider. All 100 complete, the provider's
 * accounted allocation never exceeds its onboarded share (sampled every 100 ms), no attack is
 * ever granted, nothing stays reserved afterwards, and the provider's RSS stays under a bound.
 */
import { randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { KeyPair } from '../../runtime/crypto/keys.js';
import { decodePayload } from '../../runtime/wire/envelope.js';
import { waitFor } from '../helpers/network.js';
import type { NodeProcess } from '../helpers/node.js';
import { ForeignPeer, type StrangerScene, strangerBesideTwoNodes } from '../helpers/peer.js';

const SECONDS = Number(process.env.DMS_SOAK_SECONDS ?? 60);
const JOBS = 100;
/** The provider's RSS bound under this soak (README "Who may deploy here"). */
const RSS_BOUND_MB = 400;
const MiB = 1024 * 1024;
const SHARE = { cores: 1, memory: 1024 * MiB };

let scene: StrangerScene | undefined;
let provider: NodeProcess;
let requester: NodeProcess;
let hostile: ForeignPeer;

const spec = (cores: number, memory: number) => ({ cpu: { cores }, memory: { size: memory }, storage: { size: 0 } });
const json = async (node: NodeProcess, path: string, init?: RequestInit) => (await fetch(`${node.url}${path}`, init)).json() as Promise<any>;

function rssMb(pid: number): number {
  const line = readFileSync(`/proc/${pid}/status`, 'utf8').split('\n').find((l) => l.startsWith('VmRSS:'));
  return Number(/(\d+)/.exec(line ?? '')?.[1] ?? 0) / 1024;
}

beforeAll(async () => {
  scene = await strangerBesideTwoNodes();
  ({ a: provider, b: requester, peer: hostile } = scene);
  const onboard = await fetch(`${provider.url}/api/v1/device/config`, {
    method: 'PUT',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ onboarded: { cpu: SHARE.cores, memory: SHARE.memory } }),
  });
  expect(onboard.status).toBe(200);
}, 120_000);
afterAll(() => scene?.stop());

describe('placement under a hostile peer', () => {
  it(`places ${JOBS} genuine jobs while a hostile peer attacks for ${SECONDS} s, and the share is never over-committed`, { timeout: (SECONDS + 120) * 1000 }, async () => {
    const deadline = Date.now() + SECONDS * 1000;
    const granted: string[] = [];
    const outcomes = new Map<string, number>();
    const note = (what: string) => outcomes.set(what, (outcomes.get(what) ?? 0) + 1);

    /** Sends `be` to the provider's deployment actor from the hostile peer; the reply's payload, or null when none came. */
    const ask = async (be: string, payload: unknown): Promise<any> => {
      const cont = `/private/r/${randomUUID()}`;
      await hostile.send(hostile.envelope(provider, { be: `/dms/deployment/${be}`, inbox: 'deployment', cont, payload }));
      const reply = await hostile.waitReply(cont, 5_000).catch(() => null);
      return reply ? decodePayload(reply.msg) : null;
    };
    const bidFor = (job_id: string, resources: unknown) => ask('bid', { jobs: [{ job_id, resources, executor: 'null' }] });

    /** 1. Over-commit: lease a little, start a lot. */
    const overCommit = async () => {
      const id = randomUUID();
      await bidFor(id, spec(0.1, 16 * MiB));
      const lease = await ask('reserve', { job_id: id, resources: spec(0.1, 16 * MiB), lease_ms: 60_000 });
      note(`over-commit reserve: ${lease?.until ? 'leased' : (lease?.kind ?? 'no answer')}`);
      const start = await ask('start', { job: { id, name: 'x', image: 'none', executor: 'null', resources: spec(2, 8 * 1024 * MiB) } });
      if (start?.job_id) granted.push(`a start of 2 cores on a 0.1-core lease (${id})`);
      note(`over-commit start: ${start?.kind ?? 'no answer'}`);
    };
    /** 2. Hold the share: the whole of it, renewed, and reserved from the topic. */
    const holdShare = async () => {
      const id = randomUUID();
      await bidFor(id, spec(SHARE.cores, SHARE.memory));
      const first = await ask('reserve', { job_id: id, resources: spec(SHARE.cores, SHARE.memory), lease_ms: 60_000 });
      note(`hold reserve: ${first?.until ? 'leased' : (first?.kind ?? 'no answer')}`);
      for (let i = 0; i < 3 && first?.until; i++) {
        await sleep(300);
        const again = await ask('reserve', { job_id: id, resources: spec(SHARE.cores, SHARE.memory), lease_ms: 60_000 });
        if (again?.until && again.until !== first.until) granted.push(`a renewed lease (${first.until} → ${again.until})`);
      }
      const gid = randomUUID();
      const cont = `/private/r/${randomUUID()}`;
      await hostile.publish(hostile.envelope(undefined, { be: '/dms/deployment/reserve', topic: '/dms/deployment', cont, payload: { job_id: gid, resources: spec(0.5, 64 * MiB), lease_ms: 60_000 } }));
      const gossiped = await hostile.waitReply(cont, 5_000).catch(() => null);
      const answer = gossiped ? (decodePayload(gossiped.msg) as any) : null;
      if (answer?.until) granted.push(`a lease reserved from the topic (${gid})`);
      note(`gossip reserve: ${answer?.kind ?? 'no answer'}`);
    };
    /** 3. Fill the replay cache: many throwaway keys, long-lived envelopes, one connection. */
    const keys = Array.from({ length: 32 }, () => KeyPair.generate());
    const flood = async () => {
      const sends: Promise<void>[] = [];
      for (let i = 0; i < 400; i++) {
        const key = keys[i % keys.length];
        sends.push(hostile.send(hostile.envelope(provider, { be: '/public/hello', key, ttlMs: 600_000, payload: {} })).catch(() => undefined));
      }
      await Promise.all(sends);
      note('flood: 400 sent');
    };

    const hostileLoop = async () => {
      while (Date.now() < deadline) {
        await overCommit().catch((e) => note(`over-commit threw: ${String(e).slice(0, 80)}`));
        await holdShare().catch((e) => note(`hold threw: ${String(e).slice(0, 80)}`));
        await flood().catch((e) => note(`flood threw: ${String(e).slice(0, 80)}`));
      }
    };

    let samples = 0;
    let rssMax = 0;
    const over: string[] = [];
    const sampleLoop = async () => {
      while (Date.now() < deadline) {
        const usage = await json(provider, '/api/v1/resources/usage').catch(() => null);
        if (usage) {
          samples++;
          const { allocated, onboarded } = usage;
          if (Math.round(allocated.cpu.cores * 1000) > Math.round(onboarded.cpu.cores * 1000) || allocated.memory.size > onboarded.memory.size) {
            over.push(`${allocated.cpu.cores} cores, ${allocated.memory.size} bytes`);
          }
        }
        rssMax = Math.max(rssMax, rssMb(provider.pid));
        await sleep(100);
      }
    };

    const genuine = async () => {
      const ids: string[] = [];
      for (let i = 0; i < JOBS; i += 10) {
        const batch = await Promise.all(
          Array.from({ length: 10 }, async () => {
            const r = await fetch(`${requester.url}/api/v1/jobs`, {
              method: 'POST',
              headers: { 'content-type': 'application/json' },
              body: JSON.stringify({ name: 'genuine', image: 'none', executor: 'null', resources: { cpu: 0.1, memory: '64MiB' }, environment: { DMS_NULL_DURATION_MS: '200' }, placement: { node: provider.peerId } }),
            });
            expect(r.status).toBe(201);
            return ((await r.json()) as { id: string }).id;
          }),
        );
        ids.push(...batch);
        // Spread over the run, so the jobs meet the attacks throughout.
        await sleep(Math.max(0, (SECONDS * 1000) / (JOBS / 10) / 2));
      }
      return ids;
    };

    const [, , ids] = await Promise.all([hostileLoop(), sampleLoop(), genuine()]);
    const ended = await waitFor(`all ${JOBS} genuine jobs ended`, async () => {
      const jobs = await Promise.all(ids.map((id) => json(requester, `/api/v1/jobs/${id}`)));
      return jobs.every((j) => j.status === 'completed' || j.status === 'failed') ? jobs : undefined;
    }, { timeoutMs: 60_000, intervalMs: 500 });
    const failed = ended.filter((j) => j.status !== 'completed').map((j) => `${j.id}: ${j.error}`);

    console.log(`hostile soak: ${samples} usage samples, provider RSS max ${rssMax.toFixed(0)} MB; attacks: ${JSON.stringify(Object.fromEntries(outcomes))}`);
    expect(failed).toEqual([]);
    expect(ended.filter((j) => j.node !== provider.peerId).map((j) => `${j.id} ran on ${j.node === requester.peerId ? 'the requester' : j.node}`)).toEqual([]);
    expect(granted).toEqual([]);
    expect(over).toEqual([]);
    expect(samples).toBeGreaterThan(SECONDS * 3);
    expect(rssMax).toBeLessThan(RSS_BOUND_MB);
    // Every lease the hostile peer got ends at its bound (10 s): nothing stays reserved.
    await waitFor('nothing reserved on the provider', async () => {
      const { allocated } = await json(provider, '/api/v1/resources/usage');
      return allocated.cpu.cores === 0 && allocated.memory.size === 0;
    }, { timeoutMs: 20_000 });
  });
});
