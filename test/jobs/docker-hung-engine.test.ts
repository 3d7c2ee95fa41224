/**
 * A node whose Docker engine stops answering some requests (a wedged dockerd): a job whose
 * container the engine does not create fails, naming the engine and what was asked, and its
 * share is released; a running job cancelled while the engine does not answer the stop still
 * ends. Before, the one stayed pending and the other running for good, each holding its share.
 *
 * The node runs in the test's process with DOCKER_HOST on a stand-in engine
 * (test/helpers/stand-in-engine.ts), and the node's own bound of 10 s on each answer.
 */
import { afterAll, beforeAll, expect, it } from 'vitest';
import type { LocalNode } from '../helpers/local-node.js';
import { removeHome } from '../helpers/node.js';
import { StandInEngine } from '../helpers/stand-in-engine.js';
import { within } from '../helpers/network.js';
import { Rest, startLocalJobNode } from './helpers.js';

/** The node's bound on one answer of the engine (actors/executors/engine.ts). */
const ANSWER_MS = 10_000;

let engine: StandInEngine;
let node: LocalNode;
let rest: Rest;
const dockerHost = process.env.DOCKER_HOST;

beforeAll(async () => {
  engine = await new StandInEngine().listen();
  // Read by the node's Docker client when it is made: this file's process is its own.
  process.env.DOCKER_HOST = `unix://${engine.socketPath}`;
  node = await startLocalJobNode();
  rest = new Rest(node.url);
});

afterAll(async () => {
  await node?.stop();
  if (node) removeHome(node.home);
  engine?.close();
  if (dockerHost === undefined) delete process.env.DOCKER_HOST;
  else process.env.DOCKER_HOST = dockerHost;
});

const job = () => ({ name: 'hung-engine', image: 'dms-test/busybox:latest', executor: 'docker', command: ['sleep', '3600'], resources: { cpu: 0.5, memory: '64MiB' } });
const allocatedCores = async () => (await rest.get('/api/v1/resources/usage')).body.allocated.cpu.cores as number;

it('fails a job whose container the engine does not create, naming the engine, and releases its share', { timeout: 30_000 }, async () => {
  engine.hang = /^POST \/containers\/create/;
  const before = await allocatedCores();
  const submitted = await rest.submit(job());
  // The bound and a margin, within the test's 30 s.
  const failed = await rest.waitFor(submitted.id, ['failed', 'completed'], ANSWER_MS + 8_000);
  expect(failed.error).toContain(`the Docker engine did not answer within ${ANSWER_MS} ms (creating the container)`);
  expect(await allocatedCores()).toBe(before);
  expect((await rest.get('/api/v1/health')).status).toBe(200);
});

it('ends a cancelled job whose stop the engine does not answer', { timeout: 45_000 }, async () => {
  engine.hang = null;
  const before = await allocatedCores();
  const submitted = await rest.submit(job());
  await rest.waitFor(submitted.id, ['running'], 10_000);
  engine.hang = /^POST \/containers\/[^/]+\/stop/;
  const began = performance.now();
  // The node's stop grace (1 s here) and one answer's bound, then the end is stored.
  const cancelled = await within(ANSWER_MS + 15_000, 'the cancel of a job whose stop the engine does not answer', rest.delete(`/api/v1/jobs/${submitted.id}`));
  expect(cancelled.status).toBe(200);
  expect(cancelled.body).toMatchObject({ status: 'failed', error: expect.stringContaining(`the Docker engine did not answer within ${ANSWER_MS + 1_000} ms (stopping the container)`) });
  expect(performance.now() - began).toBeLessThan(ANSWER_MS + 10_000);
  expect(await allocatedCores()).toBe(before);
});
