// The two example plugins (examples/plugins/) loaded by real node processes in dev mode: the
// greeter's behavior called over REST, from another node and through its own REST route, and
// jobs run by the echo executor, all seen on the dev stream as envelopes and transitions.
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DmsClient } from '../../client/client.js';
import { DevEvents, listenAddr, stopCluster, waitFor } from '../helpers/network.js';
import { type NodeProcess, startNode } from '../helpers/node.js';
import { Rest } from '../jobs/helpers.js';

const example = (name: string) => fileURLToPath(new URL(`../../examples/plugins/${name}/index.mjs`, import.meta.url));

let a: NodeProcess;
let b: NodeProcess;
let rest: Rest;

beforeAll(async () => {
  a = await startNode({
    env: { DMS_DEBUG: 'true' },
    timeoutMs: 45_000,
    config: {
      plugins: { modules: [example('greeter'), example('echo')], config: { greeter: { greeting: 'Howdy' } } },
      // Callers from other nodes hold no grant: the greeting is open to anyone here.
      capabilities: { open_capabilities: ['/plugin/greeter/hello'] },
      jobs: { stop_grace_s: 1 },
    },
  });
  b = await startNode({ env: { DMS_DEBUG: 'true', DMS_NETWORK_BOOTSTRAP_PEERS: listenAddr(a) }, timeoutMs: 45_000 });
  rest = new Rest(a.url);
}, 120_000);
afterAll(() => stopCluster([a, b]));

const client = (node: NodeProcess) => new DmsClient({ url: node.url, timeoutMs: 20_000 });

describe('the greeter plugin', () => {
  it('answers its behavior over REST with the greeting from plugins.config.greeter, and the envelopes are on the dev stream', async () => {
    const dev = await DevEvents.open(a.url, ['envelope'], { actor: 'greeter' });
    try {
      const reply = await client(a).invoke<{ greeting: string }>({ inbox: 'greeter' }, '/plugin/greeter/hello', { name: 'Ada' }, { raw: true });
      expect(reply.error).toBeUndefined();
      expect(reply.payload.greeting).toBe('Howdy, Ada!');
      await dev.waitFor('the hello delivered to greeter', (e) => e.type === 'envelope' && e.direction === 'in' && e.behavior === '/plugin/greeter/hello');
    } finally {
      dev.close();
    }
  });

  it('answers a payload failing its schema with an error naming the field', async () => {
    const reply = await client(a).invoke({ inbox: 'greeter' }, '/plugin/greeter/hello', { name: 42 }, { raw: true });
    expect(reply.error).toMatch(/invalid payload for \/plugin\/greeter\/hello: name/);
    const missing = await client(a).invoke({ inbox: 'greeter' }, '/plugin/greeter/hello', {}, { raw: true });
    expect(missing.error).toMatch(/name/);
  });

  it('is called from another node', async () => {
    const reply = await waitFor('a greeting from node b', async () => {
      const r = await client(b).invoke<{ greeting: string; from: string }>({ host: a.peerId, inbox: 'greeter' }, '/plugin/greeter/hello', { name: 'Bob' }, { raw: true });
      return r.error === undefined && r;
    });
    expect(reply.payload.greeting).toBe('Howdy, Bob!');
    // Signed by node b for its loopback REST caller, verified by node a.
    expect(reply.env.from.addr.host).toBe(a.peerId);
  });

  it('serves its REST route under /api/v1/plugins/greeter, documented in the OpenAPI document', async () => {
    const dev = await DevEvents.open(a.url, ['envelope'], { actor: 'greeter' });
    try {
      const hello = await rest.get('/api/v1/plugins/greeter/hello/Cy');
      expect(hello).toMatchObject({ status: 200, body: { greeting: 'Howdy, Cy!', from: a.did } });
      // The route asks the behavior by envelope, from the plugin's own actor.
      await dev.waitFor('the route\'s envelope', (e) => e.type === 'envelope' && e.direction === 'out' && e.behavior === '/plugin/greeter/hello');
    } finally {
      dev.close();
    }
    const refused = await rest.get('/api/v1/plugins/greeter/hello/nobody');
    expect(refused.status).toBe(400);
    expect(refused.body.error).toMatch(/nobody cannot be greeted/);
    expect((await rest.get('/api/v1/plugins/greeter/stats')).body.greeted).toBeGreaterThan(0);
    const doc = (await rest.get('/api/v1/openapi.json')).body;
    expect(doc.paths['/api/v1/plugins/greeter/hello/{name}'].get.operationId).toBe('plugin_greeter_hello');
  });
});

describe('the echo executor plugin', () => {
  const job = (environment: Record<string, string> = {}) => ({
    name: 'echoed',
    image: 'alpine:3',
    command: ['say', 'hello', 'world'],
    executor: 'echo',
    environment,
  });

  it('is listed in the node profile and runs a job: its command line is its output, exit 0, transitions on the dev stream', async () => {
    const dev = await DevEvents.open(a.url, ['transition']);
    try {
      const submitted = await rest.submit(job());
      const done = await rest.waitFor(submitted.id);
      expect(done).toMatchObject({ status: 'completed', exit_code: 0, executor: 'echo' });
      const logs = await rest.get(`/api/v1/jobs/${submitted.id}/logs`);
      expect(logs.body.chunks.map((c: { data: string }) => c.data).join('')).toBe('say hello world\n');
      await dev.waitFor('the echo run to exit', (e) => e.type === 'transition' && e.actor === 'executor/echo' && e.machine === 'executor-run' && e.to === 'exited');
      await dev.waitFor('the job to complete', (e) => e.type === 'transition' && e.actor === 'orchestrator' && e.machine === 'job' && e.to === 'completed');
    } finally {
      dev.close();
    }
  });

  it("is in the profile node a publishes, as another node reads it", async () => {
    const profile = await waitFor('node a\'s profile', async () => {
      const r = await client(b).invoke<{ executors: string[] }>({ host: a.peerId, inbox: 'root' }, '/public/describe', {}, { raw: true });
      return r.error === undefined && r.payload;
    });
    expect(profile.executors).toEqual(['docker', 'null', 'echo']);
  });

  it('exits with the code the job asks for, and a cancel ends a long run', async () => {
    const failed = await rest.waitFor((await rest.submit(job({ ECHO_EXIT_CODE: '3' }))).id);
    expect(failed).toMatchObject({ status: 'failed', exit_code: 3, error: 'exited with code 3' });

    const long = await rest.submit(job({ ECHO_DELAY_MS: '60000' }));
    await rest.waitFor(long.id, ['running']);
    const cancelled = await rest.delete(`/api/v1/jobs/${long.id}`);
    expect(cancelled).toMatchObject({ status: 200, body: { status: 'failed', error: expect.stringMatching(/cancelled/) } });
  });

  it('a job naming an executor nobody has is refused, listing echo among those available', async () => {
    const { status, body } = await rest.post('/api/v1/jobs', { ...job(), executor: 'nope' });
    expect(status).toBe(400);
    expect(body.error).toMatch(/available: docker, null, echo/);
  });
});
