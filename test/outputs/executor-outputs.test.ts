/**
 * Outputs of executors other than Docker (README "Job outputs"): the null executor hands back
 * the files its run left (DMS_NULL_FILES) through Executor.readOutput, and the node imports,
 * signs and serves them as it does Docker's; an executor that cannot hand outputs back fails a
 * job declaring some at its start, saying why, instead of ending it with an empty manifest.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { defineExecutor } from '../../actors/executors/actor.js';
import { NullExecutor } from '../../actors/executors/null.js';
import { OutputCollector } from '../../actors/executors/outputs.js';
import { ManifestFiles } from '../../actors/outputs/manifest-files.js';
import { OrchestratorActor } from '../../actors/orchestrator/orchestrator.js';
import { ResourceManagerActor } from '../../actors/resources/manager.js';
import type { ExecutorImplementation } from '../../behaviors/jobs/execution.js';
import { executorInbox } from '../../behaviors/jobs/executor.js';
import { JobBehaviors, ORCHESTRATOR_INBOX } from '../../behaviors/jobs/jobs.js';
import { openManifest } from '../../behaviors/jobs/manifest.js';
import { RESOURCES_INBOX } from '../../behaviors/jobs/resources.js';
import type { Job } from '../../behaviors/jobs/schema.js';
import { BlockStore } from '../../runtime/blocks/store.js';
import { makeActor } from '../../runtime/component.js';
import { KeyPair } from '../../runtime/crypto/keys.js';
import { silentLogger } from '../../runtime/log.js';
import { StartOrder } from '../../runtime/start-order.js';
import { ActorSystem } from '../../runtime/system.js';
import { openStorage } from '../../storage/index.js';
import { testActor } from '../helpers/actor.js';
import type { LocalNode } from '../helpers/local-node.js';
import { removeHome } from '../helpers/node.js';
import { waitFor } from '../helpers/network.js';
import { GiB, startLocalJobNode } from '../jobs/helpers.js';
import { tarText } from '../helpers/tar.js';

describe('a null job with outputs', () => {
  let node: LocalNode;
  beforeAll(async () => {
    node = await startLocalJobNode();
  });
  afterAll(async () => {
    await node.stop();
    removeHome(node.home);
  });

  const run = async (spec: object) => {
    const res = await fetch(`${node.url}/api/v1/jobs`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ name: 'n', image: 'none', executor: 'null', ...spec }) });
    expect(res.status, await res.clone().text()).toBe(201);
    const { id } = (await res.json()) as { id: string };
    return waitFor(`job ${id} ended`, async () => {
      const j = (await (await fetch(`${node.url}/api/v1/jobs/${id}`)).json()) as Job;
      return j.status === 'completed' || j.status === 'failed' ? j : undefined;
    });
  };

  it('imports what the run left, signs it in the manifest and serves it as a Docker job\'s', async () => {
    const files = { '/outputs/a.txt': 'alpha\n', '/outputs/sub/b.txt': 'beta\n', '/single.txt': 'one\n', '/elsewhere/x': 'not asked' };
    const job = await run({
      environment: { DMS_NULL_FILES: JSON.stringify(files), DMS_NULL_STDOUT: 'done' },
      outputs: [{ name: 'out', path: '/outputs' }, { name: 'one', path: '/single.txt' }, { name: 'gone', path: '/nowhere.txt' }, { name: 'empty', path: '/empty' }],
    });
    expect(job.status).toBe('completed');
    const manifest = openManifest(job.manifest!, { job: job.id, node: node.peerId });
    expect(manifest.logs).toMatchObject({ cid: expect.any(String), size: expect.any(Number) });
    expect(manifest.outputs).toEqual([
      { name: 'out', path: '/outputs', cid: expect.stringMatching(/^bafy/), size: 11 },
      { name: 'one', path: '/single.txt', cid: expect.stringMatching(/^bafk/), size: 4 },
      { name: 'gone', path: '/nowhere.txt', error: '/nowhere.txt does not exist in the run' },
      // As a Docker job's: a directory it never wrote to is an empty output.
      { name: 'empty', path: '/empty', cid: expect.stringMatching(/^bafy/), size: 0 },
    ]);
    const out = await fetch(`${node.url}/api/v1/jobs/${job.id}/outputs/out`);
    expect(out.headers.get('content-type')).toBe('application/x-tar');
    expect(await tarText(Buffer.from(await out.arrayBuffer()))).toEqual({ 'a.txt': 'alpha\n', 'sub/b.txt': 'beta\n' });
    expect(await (await fetch(`${node.url}/api/v1/jobs/${job.id}/outputs/one`)).text()).toBe('one\n');
    expect((await fetch(`${node.url}/api/v1/jobs/${job.id}/outputs/gone`)).status).toBe(409);
  });

  it('collects a failed run\'s outputs too, and refuses files that are not JSON of absolute paths', async () => {
    const failed = await run({ environment: { DMS_NULL_FILES: '{"/o/log":"partial"}', DMS_NULL_EXIT_CODE: '2' }, outputs: [{ name: 'o', path: '/o' }] });
    expect(failed.status).toBe('failed');
    expect(openManifest(failed.manifest!, { job: failed.id, node: node.peerId })).toMatchObject({ exit_code: 2, outputs: [{ name: 'o', size: 7 }] });
    for (const [value, says] of [
      ['not json', 'is not JSON'],
      ['{"relative":"x"}', 'an absolute path inside the container'],
      ['{"/a/../etc/passwd":"x"}', "a container path without '.' or '..'"],
    ]) {
      const bad = await run({ environment: { DMS_NULL_FILES: value }, outputs: [{ name: 'o', path: '/o' }] });
      expect(bad.status).toBe('failed');
      expect(bad.error).toContain('DMS_NULL_FILES');
      expect(bad.error).toContain(says);
    }
  });
});

describe('an executor that cannot hand outputs back', () => {
  let dir: string;
  let system: ActorSystem;
  let parts: StartOrder;
  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'dms-executor-outputs-'));
    system = new ActorSystem({ key: KeyPair.generate(), log: silentLogger(), mailbox: { capacity: 256, concurrency: 16 }, replayCapacity: 1000 });
    parts = new StartOrder(silentLogger());
    const storage = await parts.step('storage', () => openStorage(join(dir, 'dms.sqlite')), (s) => s.close());
    const blocks = new BlockStore(join(dir, 'blocks'));
    await blocks.open();
    const manifests = new ManifestFiles(join(dir, 'manifests'));
    const collector = new OutputCollector({ blocks, manifests, key: system.key, maxOutputBytes: GiB });
    // What a plugin executor without readOutput is: the null executor's runs, and nothing to hand back.
    const Plain = defineExecutor('plain', () => {
      const inner = new NullExecutor({ logsDir: join(dir, 'logs') });
      const plain: ExecutorImplementation = {
        name: 'plain',
        start: (job) => inner.start(job).then((h) => ({ ...h, executor: 'plain' })),
        wait: (h) => inner.wait(h),
        readLogs: (h, from, limit) => inner.readLogs(h, from, limit),
        waitForLogs: (h, from, signal) => inner.waitForLogs(h, from, signal),
        cancel: (h, reason) => inner.cancel(h, reason),
        cleanup: (h) => inner.cleanup(h),
        reconcile: (ids) => inner.reconcile(ids),
      };
      return plain;
    });
    await parts.component(executorInbox('plain'), () => makeActor(system, Plain, { outputCollection: { collector, logPath: (id: string) => join(dir, 'logs', `${id}.log`) } }));
    const capacity = { cpu: { cores: 4 }, memory: { size: 4 * GiB }, storage: { size: 0 } };
    await parts.component(RESOURCES_INBOX, () => makeActor(system, ResourceManagerActor, { storage, capacity, defaultName: 't' }));
    await parts.component(ORCHESTRATOR_INBOX, () => makeActor(system, OrchestratorActor, { storage, executors: ['plain'], manifests }));
  });
  afterAll(async () => {
    await parts.stop();
    await system.stop();
    await rm(dir, { recursive: true, force: true });
  });

  it('fails a job declaring outputs at its start, naming the executor and the outputs; runs one declaring none', async () => {
    const caller = await testActor(system, { inbox: 'caller' });
    const call = (be: string, payload: unknown) => caller.call(caller.local(ORCHESTRATOR_INBOX), be, payload, z.custom<Job>());
    const ended = (id: string) => waitFor(`job ${id} ended`, async () => {
      const j = await call(JobBehaviors.status, { id });
      return j.status === 'completed' || j.status === 'failed' ? j : undefined;
    });
    const declared = await call(JobBehaviors.submit, { name: 'x', image: 'none', executor: 'plain', outputs: [{ name: 'out', path: '/outputs' }, { name: 'b', path: '/b' }] });
    const job = await ended(declared.id);
    expect(job.status).toBe('failed');
    expect(job.error).toContain('executor plain cannot hand back outputs, and the job declares out, b');
    expect(job.manifest).toBeNull();
    const plain = await ended((await call(JobBehaviors.submit, { name: 'y', image: 'none', executor: 'plain' })).id);
    expect(plain.status).toBe('completed');
  });
});

describe('an output larger than blocks.max_output_bytes', () => {
  let dir: string;
  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'dms-output-cut-'));
  });
  afterAll(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it('carries an error and leaves none of its blocks: a job cannot fill the disk past the bound', async () => {
    const blocks = new BlockStore(join(dir, 'blocks'));
    await blocks.open();
    const manifests = new ManifestFiles(join(dir, 'manifests'));
    const collector = new OutputCollector({ blocks, manifests, key: KeyPair.generate(), maxOutputBytes: 4 * 1024 * 1024 });
    const out = join(dir, 'out');
    await mkdir(out);
    // Written ten blocks at a time by the importer: 2.5 MiB on disk before the bound is passed.
    await writeFile(join(out, 'big.bin'), randomBytes(12 * 1024 * 1024));
    const jobId = randomUUID();
    await collector.collect(async () => ({ path: out }), { jobId, requester: null, outputs: [{ name: 'out', path: '/out' }], exitCode: 0, logPath: join(dir, 'none.log') });
    expect(manifests.read(jobId)?.outputs[0].error).toMatch(/max_output_bytes|larger/);
    expect(blocks.bytes).toBe(0);
    expect((await blocks.files()).length).toBe(0);
  });
});
