// The resource manager actor in-process, called through envelopes as the orchestrator and the
// REST routes call it, over a real database.
import { randomUUID } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { ResourceManagerActor } from '../../actors/resources/manager.js';
import { JobBehaviors, ORCHESTRATOR_INBOX } from '../../behaviors/jobs/jobs.js';
import { DeviceBehaviors, ResourceBehaviors, RESOURCES_INBOX, type Usage } from '../../behaviors/jobs/resources.js';
import type { ResourceSpec } from '../../behaviors/jobs/schema.js';
import type { Actor } from '../../runtime/actor.js';
import { type Component, makeActor } from '../../runtime/component.js';
import { KeyPair } from '../../runtime/crypto/keys.js';
import { DmsError } from '../../runtime/errors.js';
import { silentLogger } from '../../runtime/log.js';
import { ActorSystem } from '../../runtime/system.js';
import { openStorage, type Storage } from '../../storage/index.js';
import { testActor } from '../helpers/actor.js';

const GiB = 1024 ** 3;
const capacity: ResourceSpec = { cpu: { cores: 2 }, memory: { size: 4 * GiB }, storage: { size: 10 * GiB } };
const spec = (cores: number, memory = 0): ResourceSpec => ({ cpu: { cores }, memory: { size: memory }, storage: { size: 0 } });

let dir: string;
let storage: Storage;
let system: ActorSystem;
let caller: Actor;
/** Wake-ups the manager sent to the orchestrator's inbox. */
let wakeUps: number;

async function spawnManager(machine: ResourceSpec = capacity): Promise<Component> {
  const manager = await makeActor(system, ResourceManagerActor, { storage, capacity: machine, defaultName: 'test-device' });
  await manager.start();
  return manager;
}

const call = <S extends z.ZodType>(be: string, payload: unknown, schema: S) =>
  caller.call(caller.local(RESOURCES_INBOX), be, payload, schema);
const usage = () => call(ResourceBehaviors.usage, {}, z.custom<Usage>());
const refusal = (p: Promise<unknown>) =>
  p.then(
    () => expect.fail('expected a refusal'),
    (e: unknown) => {
      expect(e).toBeInstanceOf(DmsError);
      return e as DmsError;
    },
  );

beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'dms-resources-'));
  storage = await openStorage(join(dir, 'dms.sqlite'));
  system = new ActorSystem({ key: KeyPair.generate(), log: silentLogger(), mailbox: { capacity: 64, concurrency: 8 }, replayCapacity: 1000 });
  caller = await testActor(system, { inbox: 'caller' });
  wakeUps = 0;
  await testActor(system, {
    inbox: ORCHESTRATOR_INBOX,
    behaviors: [{ name: JobBehaviors.schedule, handle: () => void wakeUps++ }],
  });
});

afterEach(async () => {
  await system.stop();
  await storage.close();
  await rm(dir, { recursive: true, force: true });
});

describe('resource manager', () => {
  it('grants jobs in order while they fit and refuses the rest naming what is short; release is idempotent', async () => {
    await spawnManager();
    const [a, b, c] = [randomUUID(), randomUUID(), randomUUID()];
    const reply = await call(
      ResourceBehaviors.reserve,
      { jobs: [{ job_id: a, resources: spec(1.5, GiB) }, { job_id: b, resources: spec(1) }, { job_id: c, resources: spec(0.5, GiB) }] },
      z.object({ granted: z.array(z.string()), refused: z.array(z.object({ job_id: z.string(), reason: z.string() })) }),
    );
    expect(reply.granted).toEqual([a, c]);
    expect(reply.refused).toEqual([{ job_id: b, reason: 'not enough cpu: 1 core asked, 0.5 cores free of 2 cores onboarded' }]);
    expect((await usage()).allocated).toEqual(spec(2, 2 * GiB));
    expect((await call(DeviceBehaviors.status, {}, z.object({ status: z.string() }))).status).toBe('busy');
    // Asking again for a job that holds its share is not asking for more.
    expect((await call(ResourceBehaviors.reserve, { jobs: [{ job_id: a, resources: spec(1.5, GiB) }] }, z.any())).granted).toEqual([a]);

    const released = z.object({ released: z.number() });
    expect(await call(ResourceBehaviors.release, { job_ids: [a, c] }, released)).toEqual({ released: 2 });
    expect(await call(ResourceBehaviors.release, { job_ids: [a, c] }, released)).toEqual({ released: 0 });
    expect((await usage()).allocated).toEqual(spec(0));
    expect((await call(DeviceBehaviors.status, {}, z.object({ status: z.string() }))).status).toBe('online');
  });

  it('runs a job on the allocation made for it, and ends the allocation with the job', async () => {
    await spawnManager();
    const job = randomUUID();
    const allocation = await call(ResourceBehaviors.allocate, { resources: spec(1, GiB), job_id: job }, z.object({ id: z.string() }));
    expect((await usage()).allocated).toEqual(spec(1, GiB));
    const again = await refusal(call(ResourceBehaviors.allocate, { resources: spec(0.5), job_id: job }, z.any()));
    expect(again.message).toBe(`job ${job} already has allocation ${allocation.id}`);

    expect((await call(ResourceBehaviors.reserve, { jobs: [{ job_id: job, resources: spec(0.5, GiB) }] }, z.any())).granted).toEqual([job]);
    // Covered by its allocation: nothing more is held.
    expect((await usage()).allocated).toEqual(spec(1, GiB));
    await call(ResourceBehaviors.release, { job_ids: [job] }, z.any());
    expect((await usage()).allocated).toEqual(spec(0));
    expect((await storage.allocations.get(allocation.id))?.released_at).not.toBeNull();
  });

  it('keeps allocations across a restart and refuses new ones that no longer fit', async () => {
    const first = await spawnManager();
    const held = await call(ResourceBehaviors.allocate, { resources: spec(1.5, GiB) }, z.object({ id: z.string() }));
    const short = await refusal(call(ResourceBehaviors.allocate, { resources: spec(1) }, z.any()));
    expect(short).toMatchObject({ kind: 'conflict', message: 'not enough cpu: 1 core asked, 0.5 cores free of 2 cores onboarded' });
    await first.stop();

    await spawnManager();
    expect((await usage()).allocated).toEqual(spec(1.5, GiB));
    await call(ResourceBehaviors.deallocate, { id: held.id }, z.any());
    expect((await usage()).allocated).toEqual(spec(0));
    const unknown = await refusal(call(ResourceBehaviors.deallocate, { id: randomUUID() }, z.any()));
    expect(unknown.kind).toBe('not_found');
  });

  it('offers the onboarded share, refuses one larger than the machine, and wakes the orchestrator when more becomes free', async () => {
    await spawnManager();
    const settings = z.object({ onboarded: z.any() });
    const over = await refusal(call(DeviceBehaviors.configure, { onboarded: spec(3) }, settings));
    expect(over).toMatchObject({ kind: 'invalid', message: 'onboarded.cpu.cores: 3 cores is more than this machine has (2 cores)' });

    await call(DeviceBehaviors.configure, { onboarded: spec(1, GiB) }, settings);
    expect(await usage()).toMatchObject({ capacity, onboarded: spec(1, GiB), free: spec(1, GiB) });
    const allocation = await call(ResourceBehaviors.allocate, { resources: spec(1) }, z.object({ id: z.string() }));
    expect(wakeUps).toBe(0);

    await call(ResourceBehaviors.deallocate, { id: allocation.id }, z.any());
    await call(DeviceBehaviors.configure, { onboarded: null }, settings);
    // Each freed something a waiting job might fit in; the wake-ups are sends, so they may trail the replies.
    await expect.poll(() => wakeUps).toBe(2);
    expect((await usage()).onboarded).toEqual(capacity);
  });

  it('does not let a job on its own allocation use more than the allocation holds: the excess comes from the share', async () => {
    await spawnManager();
    const ReserveReply = z.object({ granted: z.array(z.string()), refused: z.array(z.object({ job_id: z.string(), reason: z.string() })) });
    const small = randomUUID();
    await call(ResourceBehaviors.allocate, { resources: spec(0.5, GiB), job_id: small }, z.object({ id: z.string() }));
    // Asks for twice its allocation: reserved on its own against the share, not covered.
    expect((await call(ResourceBehaviors.reserve, { jobs: [{ job_id: small, resources: spec(1, GiB) }] }, ReserveReply)).granted).toEqual([small]);
    expect((await usage()).allocated).toEqual(spec(1.5, 2 * GiB));

    const big = randomUUID();
    await call(ResourceBehaviors.allocate, { resources: spec(0.25), job_id: big }, z.object({ id: z.string() }));
    const reply = await call(ResourceBehaviors.reserve, { jobs: [{ job_id: big, resources: spec(1) }] }, ReserveReply);
    expect(reply).toEqual({ granted: [], refused: [{ job_id: big, reason: 'not enough cpu: 1 core asked, 0.25 cores free of 2 cores onboarded' }] });
    expect((await usage()).allocated).toEqual(spec(1.75, 2 * GiB));
  });

  it('checks GPUs: an allocation covers only the GPUs it holds, and the share refuses a wrong model, too little vram or too many', async () => {
    const machine: ResourceSpec = { ...capacity, gpu: { count: 2, model: 'NVIDIA A100', vram: 40 * GiB } };
    await spawnManager(machine);
    const ReserveReply = z.object({ granted: z.array(z.string()), refused: z.array(z.object({ job_id: z.string(), reason: z.string() })) });
    const withGpus = (count: number, extra: { model?: string; vram?: number } = {}): ResourceSpec => ({ ...spec(0.1), gpu: { count, ...extra } });
    const reserve = (job_id: string, resources: ResourceSpec) => call(ResourceBehaviors.reserve, { jobs: [{ job_id, resources }] }, ReserveReply);

    const job = randomUUID();
    await call(ResourceBehaviors.allocate, { resources: withGpus(1), job_id: job }, z.object({ id: z.string() }));
    // Two GPUs on a one-GPU allocation: not covered, and the share has only one left.
    expect(await reserve(job, withGpus(2))).toEqual({ granted: [], refused: [{ job_id: job, reason: 'not enough gpu: 2 GPUs asked, 1 free of 2 onboarded' }] });
    expect(await reserve(job, withGpus(1))).toEqual({ granted: [job], refused: [] });
    expect((await usage()).allocated.gpu?.count).toBe(1);

    const other = randomUUID();
    expect((await reserve(other, withGpus(1, { model: 'H100' }))).refused).toEqual([{ job_id: other, reason: 'no gpu of model H100: this node offers NVIDIA A100' }]);
    expect((await reserve(other, withGpus(1, { vram: 80 * GiB }))).refused).toEqual([
      { job_id: other, reason: 'not enough gpu memory: 80 GiB asked per GPU, this node\'s GPUs have 40 GiB' },
    ]);
    expect(await reserve(other, withGpus(1, { model: 'a100', vram: 40 * GiB }))).toEqual({ granted: [other], refused: [] });
    const third = randomUUID();
    expect((await reserve(third, withGpus(1))).refused).toEqual([{ job_id: third, reason: 'not enough gpu: 1 GPUs asked, 0 free of 2 onboarded' }]);
  });
});
