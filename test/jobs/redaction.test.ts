// Job environments through the orchestrator's behaviors, in-process: the node's own actors see
// the values, a sender that is neither the node nor one of its roots sees them redacted.
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { NullExecutorActor } from '../../actors/executors/actor.js';
import { OrchestratorActor } from '../../actors/orchestrator/orchestrator.js';
import { ResourceManagerActor } from '../../actors/resources/manager.js';
import { JobBehaviors, ORCHESTRATOR_INBOX } from '../../behaviors/jobs/jobs.js';
import type { Job } from '../../behaviors/jobs/schema.js';
import type { Actor } from '../../runtime/actor.js';
import { replyWaiter } from '../../runtime/behavior.js';
import { makeActor } from '../../runtime/component.js';
import { KeyPair } from '../../runtime/crypto/keys.js';
import { silentLogger } from '../../runtime/log.js';
import { StartOrder } from '../../runtime/start-order.js';
import { ActorSystem } from '../../runtime/system.js';
import { decodePayload, type Envelope } from '../../runtime/wire/envelope.js';
import { openStorage, type Storage } from '../../storage/index.js';
import { envelope, newCaller } from '../helpers/envelopes.js';
import { nullJob } from './helpers.js';
import { testActor } from '../helpers/actor.js';

const GiB = 1024 ** 3;
let dir: string;
let storage: Storage;
let system: ActorSystem;
let parts: StartOrder;
let local: Actor;
const root = KeyPair.generate();

beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'dms-redaction-'));
  storage = await openStorage(join(dir, 'dms.sqlite'));
  system = new ActorSystem({ key: KeyPair.generate(), log: silentLogger(), mailbox: { capacity: 64, concurrency: 8 }, replayCapacity: 1000 });
  parts = new StartOrder(silentLogger());
  await parts.component('executor/null', () => makeActor(system, NullExecutorActor, { logsDir: join(dir, 'logs') }));
  const capacity = { cpu: { cores: 4 }, memory: { size: 4 * GiB }, storage: { size: 0 } };
  await parts.component('resources', () => makeActor(system, ResourceManagerActor, { storage, capacity, defaultName: 't' }));
  const own = (id: string) => id === system.key.id || system.listActors().some((a) => a.key.id === id);
  const trusted = (env: Envelope) => own(env.from.id) || env.from.did === root.did;
  await parts.component('orchestrator', () => makeActor(system, OrchestratorActor, { storage, executors: ['null'], trusted }));
  local = await testActor(system, { inbox: 'local-caller' });
});

afterEach(async () => {
  await parts.stop();
  await system.stop();
  await storage.close();
  await rm(dir, { recursive: true, force: true });
});

/** Sends `be` as a foreign, signed sender (as one arriving from another node) and returns the reply. */
async function asStranger(be: string, payload: unknown, key = KeyPair.generate()): Promise<any> {
  const caller = { ...newCaller(), key };
  const cont = `/reply/${Math.random().toString(16).slice(2)}`;
  let resolve!: (payload: unknown) => void;
  const reply = new Promise((r) => (resolve = r));
  // A reply reaches only a behavior that waits for one.
  await testActor(system, { inbox: caller.inbox, behaviors: [replyWaiter(cont, (env) => resolve(decodePayload(env.msg)))] });
  const env = envelope(caller, { to: local.local(ORCHESTRATOR_INBOX), be, payload, cont });
  // A signed envelope from outside the node's own actors; its reply stays on this node.
  await system.accept(env, { kind: 'rest', trusted: false });
  return reply;
}

describe('environment redaction in the job behaviors', () => {
  it('gives values to the node itself and roots, and "[redacted]" to other senders, in status, list and cancel', async () => {
    const job = await local.call(local.local(ORCHESTRATOR_INBOX), JobBehaviors.submit, { ...nullJob({ durationMs: 60_000 }), environment: { DMS_NULL_DURATION_MS: '60000', TOKEN: 'hunter2' } }, z.custom<Job>());
    expect(job.environment.TOKEN).toBe('hunter2');
    const mine = await local.call(local.local(ORCHESTRATOR_INBOX), JobBehaviors.status, { id: job.id }, z.custom<Job>());
    expect(mine.environment).toEqual({ DMS_NULL_DURATION_MS: '60000', TOKEN: 'hunter2' });

    const status = await asStranger(JobBehaviors.status, { id: job.id });
    expect(status.environment).toEqual({ DMS_NULL_DURATION_MS: '[redacted]', TOKEN: '[redacted]' });
    const list = await asStranger(JobBehaviors.list, {});
    expect(list.jobs.map((j: Job) => j.environment)).toEqual([{ DMS_NULL_DURATION_MS: '[redacted]', TOKEN: '[redacted]' }]);
    expect((await asStranger(JobBehaviors.status, { id: job.id }, root)).environment.TOKEN).toBe('hunter2');
    const cancelled = await asStranger(JobBehaviors.cancel, { id: job.id });
    expect(cancelled).toMatchObject({ status: 'failed', environment: { TOKEN: '[redacted]' } });
  });
});
