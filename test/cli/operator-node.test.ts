// The rough edges of an operator's first day on one node, each against the real CLI or a real
// node: init --onboard, a spec's bare YAML `executor: null`, `--json run`'s stdout, a busy REST
// port, a home's config being the home's and `config get` saying where a value came from, a
// share missing its memory, and the plugin contract as the README states it (a missing payload
// field's wording, the rate limit on plugin routes).
import { readFileSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:net';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DmsClient } from '../../client/client.js';
import { freePort } from '../helpers/network.js';
import { type NodeProcess, removeHome, runCli, startNode, tempHome } from '../helpers/node.js';
import { Rest } from '../jobs/helpers.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const README = readFileSync(join(ROOT, 'README.md'), 'utf8');
const homes: string[] = [];
const nodes: NodeProcess[] = [];
const home = (): string => {
  const h = tempHome('dms-operator-node-');
  homes.push(h);
  return h;
};
const NULL_JOB = ['--executor', 'null', '--cpu', '0.1', '--memory', '16MiB'];

let node: NodeProcess;

beforeAll(async () => {
  node = await startNode({ config: { network: { enabled: false }, general: { log_level: 'warn' } }, timeoutMs: 45_000 });
  nodes.push(node);
}, 60_000);

afterAll(async () => {
  await Promise.all(nodes.map((n) => n.stop()));
  for (const n of nodes) removeHome(n.home);
  homes.forEach(removeHome);
}, 60_000);

describe('dms init --onboard', { timeout: 90_000 }, () => {
  it('writes the share, labels and region before any node runs; the node started later offers them', async () => {
    const h = home();
    const init = await runCli(['--home', h, 'init', '--onboard', '--cpu', '0.5', '--memory', '128MiB', '--label', 'zone=lab', '--region', 'eu-west']);
    expect(init.code, init.stderr).toBe(0);
    expect(init.stdout).toContain('offered   0.5 cores, 128 MiB memory');
    const started = await startNode({ home: h, config: { network: { enabled: false } }, timeoutMs: 45_000 });
    nodes.push(started);
    const show = await runCli(['--home', h, 'onboard', '--show']);
    expect(show.code, show.stderr).toBe(0);
    expect(show.stdout).toContain('offered to the network: 0.5 cores, 128 MiB memory');
    expect(show.stdout).toContain('zone=lab');
    expect(show.stdout).toContain('eu-west');
  });

  it('refuses a share larger than the machine, and share flags without --onboard', async () => {
    const h = home();
    const big = await runCli(['--home', h, 'init', '--onboard', '--cpu', '100000', '--memory', '1GiB']);
    expect(big.code).not.toBe(0);
    expect(big.stderr).toMatch(/^dms: onboarded\.cpu\.cores: 100000 cores is more than this machine has \(\d+ cores?\)\n$/);
    const bare = await runCli(['--home', h, 'init', '--cpu', '1', '--memory', '1GiB']);
    expect(bare.code).not.toBe(0);
    expect(bare.stderr).toContain('add --onboard');
  });
});

describe('jobs and runs', { timeout: 60_000 }, () => {
  it('a YAML spec with a bare `executor: null` runs with the null executor', async () => {
    const spec = join(home(), 'null.yaml');
    writeFileSync(spec, 'name: bare-null\nimage: none\nexecutor: null\nresources: {cpu: 0.1, memory: 16MiB}\n');
    const r = await runCli(['--home', node.home, 'jobs', 'submit', spec, '--wait']);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stderr).toContain('completed');
    expect(README).toMatch(/executor: docker +# default docker; or null \(bare null in YAML/);
  });

  it('--json run keeps stdout all JSON: each chunk of output a line, then the end', async () => {
    const r = await runCli(['--home', node.home, '--json', 'run', ...NULL_JOB, '-e', 'DMS_NULL_STDOUT=plain text', 'none']);
    expect(r.code, r.stderr).toBe(0);
    const lines = r.stdout.trimEnd().split('\n').map((l) => JSON.parse(l) as Record<string, unknown>);
    expect(lines[0]).toMatchObject({ event: 'log', stream: 'stdout', data: expect.stringContaining('plain text') });
    expect(lines.at(-1)).toMatchObject({ event: 'end', status: 'completed', exit_code: 0 });
    expect(r.stderr).toMatch(/job \S+ (runs|ran) on this node/);
  });

  it('a share without its memory says memory is required, not that its form is wrong', async () => {
    const r = await new Rest(node.url).put('/api/v1/device/config', { onboarded: { cpu: 1 } });
    expect(r.status).toBe(400);
    expect(r.body.error).toMatch(/^invalid device settings: onboarded\.memory: required \(a size/);
  });

  it('dms onboard without a share or settings says what to give; a half share names the other half', async () => {
    const none = await runCli(['--home', node.home, 'onboard']);
    expect(none.code).not.toBe(0);
    expect(none.stderr).toContain('nothing to onboard: give --cpu and --memory');
    const half = await runCli(['--home', node.home, 'onboard', '--cpu', '1']);
    expect(half.stderr).toContain('a share needs both --cpu and --memory');
  });
});

describe('a busy REST port', { timeout: 60_000 }, () => {
  let holder: Server;
  let port: number;
  beforeAll(async () => {
    port = await freePort();
    holder = createServer();
    await new Promise<void>((resolve) => holder.listen(port, '127.0.0.1', resolve));
  });
  afterAll(() => new Promise<void>((resolve) => holder.close(() => resolve())));

  for (const detach of [false, true]) {
    it(`is said at once, naming the port, who holds it and the way out${detach ? ' (--detach)' : ''}`, async () => {
      const t0 = Date.now();
      const r = await runCli(['--home', home(), 'start', '--port', String(port), ...(detach ? ['--detach'] : [])]);
      expect(Date.now() - t0).toBeLessThan(5_000);
      expect(r.code).not.toBe(0);
      expect(r.stderr).toBe(`dms: rest: port ${port} on 127.0.0.1 is in use by pid ${process.pid} (node); start with --port <another> (or --port 0 for a free one), or set rest.port\n`);
    });
  }
});

describe("a home's config is the home's", { timeout: 90_000 }, () => {
  it('config set from a directory with its own dms_config.json copies nothing of it into the home', async () => {
    const checkout = home();
    writeFileSync(join(checkout, 'dms_config.json'), JSON.stringify({ rest: { port: 9999 }, general: { name: 'checkout' } }));
    const h = home();
    const set = await runCli(['--home', h, 'config', 'set', 'general.log_level', 'warn'], {}, checkout);
    expect(set.code, set.stderr).toBe(0);
    expect(JSON.parse(readFileSync(join(h, 'dms_config.json'), 'utf8'))).toEqual({ general: { log_level: 'warn' } });
    expect(set.stdout).toContain('is no longer read for it');
  });

  it('config get of a key set at start says the value in effect and where it came from', async () => {
    const h = home();
    writeFileSync(join(h, 'dms_config.json'), JSON.stringify({ rest: { port: 9999 }, network: { enabled: false } }));
    const port = await freePort();
    const started = await startNode({ home: h, configuredPort: true, args: ['--port', String(port)], timeoutMs: 45_000 });
    nodes.push(started);
    const get = await runCli(['--home', h, 'config', 'get', 'rest.port']);
    expect(get.code, get.stderr).toBe(0);
    expect(get.stdout).toBe(`${port}\n`);
    expect(get.stderr).toBe(`# from --port of the node running now (pid ${started.pid}); ${join(h, 'dms_config.json')} says 9999\n`);
    const json = JSON.parse((await runCli(['--home', h, '--json', 'config', 'get', 'network.enabled'])).stdout);
    expect(json).toEqual({ key: 'network.enabled', value: false, source: join(h, 'dms_config.json') });
    const env = JSON.parse((await runCli(['--home', h, '--json', 'config', 'get', 'db.path'], { DMS_DB_PATH: '/tmp/from-env.sqlite' })).stdout);
    expect(env).toEqual({ key: 'db.path', value: '/tmp/from-env.sqlite', source: 'DMS_DB_PATH' });
    const dflt = await runCli(['--home', h, 'config', 'get', 'jobs.stop_grace_s']);
    expect(dflt.stderr).toBe('# from default\n');
  });
});

describe('the plugin contract, as the README states it', { timeout: 90_000 }, () => {
  let plugged: NodeProcess;
  beforeAll(async () => {
    plugged = await startNode({
      timeoutMs: 45_000,
      config: {
        network: { enabled: false },
        plugins: { modules: [join(ROOT, 'examples/plugins/greeter/index.mjs')] },
        rest: { rate_limit: { per_second: 2, burst: 30, loopback: true } },
      },
    });
    nodes.push(plugged);
  }, 60_000);

  it('a payload missing a field is answered in the words the README gives', async () => {
    const reply = await new DmsClient({ url: plugged.url, timeoutMs: 20_000 }).invoke<unknown>({ inbox: 'greeter' }, '/plugin/greeter/hello', {}, { raw: true });
    expect(reply.error).toBe('invalid payload for /plugin/greeter/hello: name is required');
    expect(README).toContain('a missing one `invalid payload for <be>: <field> is required`');
  });

  it('the REST rate limit covers plugin routes and the other authenticated routes, as the configuration table says', async () => {
    // The jobs route is asked after the burst, ten at once: asked alone, a bucket refilling at 2
    // a second could hold a token again by then on a loaded machine, and asked with the burst it
    // could be served before the burst had emptied the bucket. Ten need 5 s of refill to pass.
    const status = (path: string) => fetch(`${plugged.url}${path}`).then((r) => r.status);
    const answers = await Promise.all(Array.from({ length: 45 }, () => status('/api/v1/plugins/greeter/hello/ada')));
    expect(answers.filter((s) => s === 429).length).toBeGreaterThanOrEqual(10);
    const jobs = await Promise.all(Array.from({ length: 10 }, () => status('/api/v1/jobs')));
    expect(jobs).toContain(429);
    // The health probe stays open to supervisors.
    expect((await fetch(`${plugged.url}/health`)).status).toBe(200);
    expect(README).toMatch(/\| `rest\.rate_limit\.per_second` \| `100` \| sustained requests per client to every authenticated route/);
  });
});
