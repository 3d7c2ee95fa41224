// Every step of a job is a state machine's transition the node can watch: a real job on an
// in-process node (the null executor, the resource manager, the orchestrator, as daemon/jobs.ts
// starts them) seen through system.events, the job's machine and its executor's run machine.
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, expect, it } from 'vitest';
import { z } from 'zod';
import { NullExecutorActor } from '../../actors/executors/actor.js';
import { OrchestratorActor } from '../../actors/orchestrator/orchestrator.js';
import { ResourceManagerActor } from '../../actors/resources/manager.js';
import { executorInbox } from '../../behaviors/jobs/executor.js';
import { JobBehaviors, ORCHESTRATOR_INBOX } from '../../behaviors/jobs/jobs.js';
import { RESOURCES_INBOX } from '../../behaviors/jobs/resources.js';
import type { Job } from '../../behaviors/jobs/schema.js';
import { makeActor } from '../../runtime/component.js';
import { KeyPair } from '../../runtime/crypto/keys.js';
import { silentLogger } from '../../runtime/log.js';
import { StartOrder } from '../../runtime/start-order.js';
import { ActorSystem, type SystemEvent } from '../../runtime/system.js';
import { openStorage, type Storage } from '../../storage/index.js';
import { waitFor } from '../helpers/network.js';
import { GiB, nullJob } from './helpers.js';
import { testActor } from '../helpers/actor.js';

type Transition = Extract<SystemEvent, { type: 'transition' }>;

let dir: string;
let storage: Storage;
let system: ActorSystem;
let parts: StartOrder;

beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'dms-transitions-'));
  system = new ActorSystem({ key: KeyPair.generate(), log: silentLogger(), mailbox: { capacity: 256, concurrency: 16 }, replayCapacity: 1000 });
  parts = new StartOrder(silentLogger());
  storage = await parts.step('storage', () => openStorage(join(dir, 'dms.sqlite')), (s) => s.close());
  await parts.component(executorInbox('null'), () => makeActor(system, NullExecutorActor, { logsDir: join(dir, 'logs') }));
  const capacity = { cpu: { cores: 4 }, memory: { size: 4 * GiB }, storage: { size: 0 } };
  await parts.component(RESOURCES_INBOX, () => makeActor(system, ResourceManagerActor, { storage, capacity, defaultName: 't' }));
  await parts.component(ORCHESTRATOR_INBOX, () => makeActor(system, OrchestratorActor, { storage, executors: ['null'] }));
});

afterEach(async () => {
  await parts.stop();
  await system.stop();
  await rm(dir, { recursive: true, force: true });
});

/** Every transition from now on, and a caller of the orchestrator's behaviors. */
async function watching() {
  const seen: Transition[] = [];
  system.events.subscribe((e) => {
    if (e.type === 'transition') seen.push(e);
  });
  const caller = await testActor(system, { inbox: 'caller' });
  const call = (be: string, payload: unknown) => caller.call(caller.local(ORCHESTRATOR_INBOX), be, payload, z.custom<Job>());
  return { seen, call };
}

it('shows a job running to completion as the transitions of its machine and of its executor run, in order', async () => {
  const { seen, call } = await watching();
  const job = await call(JobBehaviors.submit, nullJob({ durationMs: 50, stdout: 'hi' }));
  await waitFor('the job to complete', async () => (await call(JobBehaviors.status, { id: job.id })).status === 'completed');

  const step = (t: Transition) => `${t.actor} ${t.machine}: ${t.from} → ${t.to} (${t.event})`;
  const ours = seen.filter((t) => t.machine === 'job' || t.machine === 'executor-run').map(step);
  const job_ = [
    'orchestrator job: (start) → pending (xstate.init)',
    'orchestrator job: pending → starting (reserved)',
    'orchestrator job: starting → running (started)',
    'orchestrator job: running → completed (exited)',
  ];
  const run = [
    'executor/null executor-run: (start) → creating (xstate.init)',
    'executor/null executor-run: creating → running (created)',
    'executor/null executor-run: running → exited (exited)',
  ];
  expect(ours.filter((s) => s.includes(' job: '))).toEqual(job_);
  expect(ours.filter((s) => s.includes(' executor-run: '))).toEqual(run);
  // And one after the other across the two: the run starts while the job starts, the job runs
  // once its run does, and completes once its run has exited.
  const at = (s: string) => ours.indexOf(s);
  expect(at(job_[1])).toBeLessThan(at(run[0]));
  expect(at(run[1])).toBeLessThan(at(job_[2]));
  expect(at(run[2])).toBeLessThan(at(job_[3]));
});

it('shows a cancelled job stopping, and its run killed before the job fails', async () => {
  const { seen, call } = await watching();
  const job = await call(JobBehaviors.submit, nullJob({ durationMs: 60_000 }));
  await waitFor('the job to run', () => seen.some((t) => t.machine === 'job' && t.to === 'running'));
  const cancelled = await call(JobBehaviors.cancel, { id: job.id });
  expect(cancelled).toMatchObject({ status: 'failed', error: 'cancelled' });

  const steps = seen.filter((t) => t.machine === 'job' || t.machine === 'executor-run').map((t) => `${t.machine}: ${t.to}`);
  expect(steps.slice(steps.indexOf('job: running'))).toEqual(['job: running', 'job: stopping', 'executor-run: stopping', 'executor-run: killed', 'job: failed']);
});
