// Attacks on a running node, each reproduced through its REST interface against a real node
// (started in this process: its REST server and SQLite file are the real ones): bad image references, private registries, environment secrets, file modes, bad ids,
// and output that would not fit in memory.
import { statSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { DiscoveryBehaviors, NodeProfile } from '../../behaviors/discovery.js';
import type { Job } from '../../behaviors/jobs/schema.js';
import { apiKeysPath, createApiKey } from '../../runtime/api-keys.js';
import { testActor } from '../helpers/actor.js';
import { type LocalNode, startLocalNode } from '../helpers/local-node.js';
import { removeHome, tempHome } from '../helpers/node.js';
import { privateNameHere } from '../helpers/private-name.js';
import { gate } from '../helpers/required.js';
import { MiB, nullJob, Rest, startLocalJobNode, until } from './helpers.js';

const nodes: LocalNode[] = [];
afterAll(async () => {
  for (const n of nodes) {
    await n.stop();
    removeHome(n.home);
  }
});

const here = await privateNameHere();
gate('the private registry name tests', here === null ? `this machine's name does not resolve to a private address (add it to /etc/hosts)` : null, 'DMS_REQUIRE_PRIVATE_NAME');

const healthy = async (node: LocalNode) => (await fetch(`${node.url}/health`)).status === 200;

describe('image references at submit', () => {
  let node: LocalNode;
  let rest: Rest;
  beforeAll(async () => {
    node = await startLocalJobNode({ jobs: { allowed_registries: ['10.1.2.3:5000'] } });
    nodes.push(node);
    rest = new Rest(node.url);
  });

  it.each(['//x/y', '../../containers/json?all=1#', 'UPPER/Case', 'a/b:tag@sha256:xyz', 'x/../../y'])(
    'answers 400 naming image for %j and stays up',
    async (image) => {
      const before = (await rest.jobs()).total;
      const answer = await rest.post('/api/v1/jobs', { name: 'evil', image, command: ['true'], resources: { cpu: { cores: 0.1 }, memory: { size: 16 * MiB } } });
      expect(answer.status).toBe(400);
      expect(answer.body.error).toMatch(/^invalid job spec: image: not a Docker image reference: /);
      expect((await rest.jobs()).total).toBe(before);
      expect(await healthy(node)).toBe(true);
    },
  );

  it.each(['127.0.0.1:5000/x', 'localhost/x', '[::1]:5000/x', '169.254.169.254/latest', '10.0.0.1/x', '172.16.5.4/x', '192.168.0.1/x', '[fe80::1]/x', '[fd00::1]/x', '0.0.0.0/x',
    // Carrier-grade NAT (a cloud's metadata service), IPv4-compatible and NAT64 forms of loopback.
    '100.100.100.200/x', '[::7f00:1]/x', '[64:ff9b::7f00:1]/x', '[64:ff9b::a9fe:a9fe]/x'])(
    'refuses the private registry of %s with 400 naming image',
    async (image) => {
      const answer = await rest.post('/api/v1/jobs', { ...nullJob(), image });
      expect(answer.status).toBe(400);
      expect(answer.body.error).toMatch(/^image: registry .* list it in jobs\.allowed_registries to pull from it$/);
    },
  );

  it.skipIf(here === null)(
    `refuses a registry name that resolves to a private address: this machine's name (${here?.name})`,
    async () => {
      const before = (await rest.jobs()).total;
      const answer = await rest.post('/api/v1/jobs', { ...nullJob(), image: `${here!.name}:5000/x` });
      expect(answer.status).toBe(400);
      expect(answer.body.error).toMatch(new RegExp(`^image: registry ${here!.name}:5000 resolves to .*, a non-public address; list it in jobs\\.allowed_registries to pull from it$`));
      expect(here!.addresses).toContain(/resolves to (\S+) \(/.exec(answer.body.error)![1]);
      expect((await rest.jobs()).total).toBe(before);
      expect(await healthy(node)).toBe(true);
    },
  );

  it('accepts a private registry listed in jobs.allowed_registries, and public ones', async () => {
    for (const image of ['10.1.2.3:5000/team/app:1', 'ghcr.io/org/app', 'busybox', '100.128.0.1/x', '[2606:4700::1111]/x']) {
      const job = await rest.submit({ ...nullJob(), image });
      expect(job.image).toBe(image);
    }
    const other = await rest.post('/api/v1/jobs', { ...nullJob(), image: '10.1.2.3:6000/team/app' });
    expect(other.status).toBe(400);
  });
});

describe('input errors are 4xx', () => {
  let rest: Rest;
  let node: LocalNode;
  beforeAll(async () => {
    node = await startLocalJobNode();
    nodes.push(node);
    rest = new Rest(node.url);
  });

  it('answers 400 for a 200-character job or allocation id, 400 for bad escapes, 404 for unknown ids, never 500', async () => {
    const long = 'a'.repeat(200);
    for (const path of [`/api/v1/jobs/${long}`, `/api/v1/jobs/${long}/logs`, `/api/v1/jobs/${long}/logs?follow=true`]) {
      const answer = await rest.get(path);
      expect(answer.status, path).toBe(400);
      expect(answer.body.error).toMatch(/^invalid job id: /);
    }
    expect((await rest.delete(`/api/v1/jobs/${long}`)).status).toBe(400);
    const allocation = await rest.delete(`/api/v1/allocations/${long}`);
    expect(allocation.status).toBe(400);
    expect(allocation.body.error).toMatch(/^invalid allocation id: /);
    for (const path of ['/api/v1/jobs/%E0%A4%A', '/api/v1/jobs/%E0%A4%A/logs']) expect((await rest.get(path)).status, path).toBe(400);
    expect((await rest.delete('/api/v1/allocations/%zz')).status).toBe(400);
    expect((await rest.get('/api/v1/jobs/x.y')).status).toBe(404);
    expect((await rest.get('/api/v1/jobs/x/logs?from=-1')).status).toBe(400);
    expect((await rest.get('/api/v1/jobs/x/logs?limit=0')).status).toBe(400);
    expect((await rest.get(`/api/v1/jobs/x/logs?limit=${9 * MiB}`)).status).toBe(400);
  });
  it('refuses a spec with half of a surrogate pair, which it would have stored as another character', async () => {
    const answer = await fetch(`${node.url}/api/v1/jobs`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"name":"\\ud800","image":"none","executor":"null"}' });
    expect(answer.status).toBe(400);
    expect(((await answer.json()) as { error: string }).error).toContain('half of a surrogate pair');
  });

  it('answers an id holding a NUL or another control character with 4xx on every route that takes one, never 500', async () => {
    // Found on a running node: GET /api/v1/jobs/%00 answered 500, SQLite having read the ORM's
    // SQL as a C string, ended by the NUL.
    for (const id of ['%00', 'a%00b', '%01', '%7F']) {
      for (const path of ['', '/logs', '/events', '/outputs', '/ports', '/grants']) {
        const answer = await rest.get(`/api/v1/jobs/${id}${path}`);
        expect(answer.status, `GET jobs/${id}${path}`).toBe(400);
        expect(answer.body.error).toMatch(/^invalid job id: .*a job id holds no control character/);
      }
      expect((await rest.delete(`/api/v1/jobs/${id}`)).status).toBe(400);
      expect((await rest.post(`/api/v1/jobs/${id}/ports/80/forward`, {})).status).toBe(400);
      // Found on a running node: an ensemble id %00 was answered 404 "not found", where a job id was 400.
      for (const answer of [await rest.get(`/api/v1/ensembles/${id}`), await rest.delete(`/api/v1/ensembles/${id}`)]) {
        expect(answer.status, JSON.stringify(answer.body)).toBe(400);
        expect(answer.body.error).toMatch(/^invalid ensemble id: .*an ensemble id holds no control character/);
      }
      const allocation = await rest.delete(`/api/v1/allocations/${id}`);
      expect(allocation.status, JSON.stringify(allocation.body)).toBe(400);
      expect(allocation.body.error).toMatch(/an allocation id holds no control character/);
    }
    expect(await healthy(node)).toBe(true);
  });

  it('stores a job whose name holds a NUL beside another, and refuses one in what a process is given with 400, never 500', async () => {
    // Found on a running node: SQLite read the group commit's SQL as a C string, so the NUL ended
    // it and the whole batch failed, the jobs beside the odd one with it.
    const nul = 'a\u0000b';
    const [odd, beside] = await Promise.all([rest.post('/api/v1/jobs', nullJob({ name: nul })), rest.post('/api/v1/jobs', nullJob({ name: 'beside' }))]);
    expect([odd.status, beside.status], JSON.stringify([odd.body, beside.body])).toEqual([201, 201]);
    expect(odd.body.name).toBe(nul);
    const ended = (id: string) =>
      until(`job ${id} to end`, async () => {
        const job = (await rest.get<Job>(`/api/v1/jobs/${id}`)).body;
        return job.status === 'completed' || job.status === 'failed' ? job : undefined;
      });
    expect(await ended(odd.body.id)).toMatchObject({ name: nul, status: 'completed' });
    expect(await ended(beside.body.id)).toMatchObject({ status: 'completed' });
    const device = await rest.put('/api/v1/device/config', { name: nul });
    expect(device.status).toBe(200);
    expect(device.body.name).toBe(nul);
    // A process cannot be given one: refused at the door rather than failing at the container's start.
    for (const [field, spec] of [
      ['environment.A', { ...nullJob(), environment: { A: nul } }],
      ['secrets.S', { ...nullJob(), secrets: { S: nul } }],
      ['command.1', { ...nullJob(), command: ['echo', nul] }],
    ] as const) {
      const answer = await rest.post('/api/v1/jobs', spec);
      expect(answer.status, field).toBe(400);
      expect(answer.body.error).toContain(`${field}: a NUL character cannot be passed to a process`);
    }
  });

  it('refuses at submit what could never run or count, naming the field: 1e308 cores, a mount point twice or under /proc, an environment past what Linux passes', async () => {
    // Found on a running node: 1e308 cores became Infinity, then null (409 "needs Infinity
    // cores"); the others were accepted (201) and failed at the container's start.
    const cid = 'bafkreigh2akiscaildcqabsyg3dfr6chu3fgpregiymsck7e7aqa4s52zy';
    for (const [fields, error] of [
      [{ resources: { cpu: 1e308 } }, 'resources.cpu.cores: 1e+308 cores is too many: at most 1000000'],
      [{ resources: { memory: 1e308 } }, 'resources.memory.size: 1e+308 bytes is too large'],
      [{ inputs: [{ source: cid, path: '/a' }, { source: cid, path: '//a' }] }, "inputs: each mount point (path) at most once: inputs.1.path '//a' is inputs.0.path '/a'"],
      [{ inputs: [{ source: cid, path: '/a' }, { source: cid, path: '/a/b' }] }, "inputs.1.path: '/a/b' is inside inputs.0.path '/a'"],
      [{ inputs: [{ source: cid, path: '/proc/sys/kernel' }] }, "inputs.0.path: '/proc/sys/kernel' is at or under /proc"],
      [{ outputs: [{ name: 'o', path: '/dev/shm' }] }, "outputs.0.path: '/dev/shm' is at or under /dev"],
      [{ environment: { BIG: 'x'.repeat(200 * 1024) } }, 'environment.BIG: BIG=… is 204804 bytes, more than the 131071 Linux passes as one variable'],
      [{ environment: { ['N'.repeat(100 * 1024)]: 'v' } }, 'an environment name is at most 256 bytes'],
    ] as const) {
      const answer = await rest.post('/api/v1/jobs', { ...nullJob(), ...fields });
      expect(answer.status, error).toBe(400);
      expect(answer.body.error).toMatch(/^invalid job spec: /);
      expect(answer.body.error).toContain(error);
    }
    // The same cores wherever they are written.
    const allocation = await rest.post('/api/v1/allocations', { resources: { cpu: 1e308, memory: '64MiB' } });
    expect(allocation.status).toBe(400);
    expect(allocation.body.error).toContain('resources.cpu.cores: 1e+308 cores is too many');
    const onboarded = await rest.put('/api/v1/device/config', { onboarded: { cpu: 1e308, memory: '64MiB' } });
    expect(onboarded.status).toBe(400);
    expect(onboarded.body.error).toContain('onboarded.cpu.cores: 1e+308 cores is too many');
    const ensemble = await rest.post('/api/v1/ensembles', { name: 'e', parts: { a: { image: 'none', executor: 'null', resources: { cpu: 1e308 } } } });
    expect(ensemble.status).toBe(400);
    expect(ensemble.body.error).toContain('parts.a.resources.cpu.cores: 1e+308 cores is too many');
    expect(await healthy(node)).toBe(true);
  });
});

describe('a list of large jobs', () => {
  it('holds at most 8 MiB of jobs a page, and the total says how many more there are', { timeout: 60_000 }, async () => {
    // Found on a running node: 130 jobs of ~1 MiB each made GET /api/v1/jobs?limit=1000 a 137 MB
    // body, the node 0.5 -> 1.8 GB, /health answered after 10.8 s meanwhile.
    const node = await startLocalJobNode();
    nodes.push(node);
    const rest = new Rest(node.url);
    // Each just under the body limit (1 MiB): twelve of them are 10.4 MiB. In arguments of 127 KiB:
    // one argument may be at most 128 KiB (Linux's MAX_ARG_STRLEN), so a spec with a larger one is refused.
    const big = { ...nullJob({ name: 'big' }), command: ['echo', ...Array.from({ length: 7 }, () => 'x'.repeat(127 * 1024))] };
    for (let i = 0; i < 12; i++) expect((await rest.post('/api/v1/jobs', big)).status).toBe(201);
    const first = await rest.jobs('/api/v1/jobs?limit=1000');
    expect(first.total).toBe(12);
    expect(first.jobs.length).toBeGreaterThanOrEqual(1);
    expect(first.jobs.length).toBeLessThanOrEqual(9);
    // Paged on by the count received, every job comes once.
    const seen = first.jobs.map((j) => j.id);
    while (seen.length < first.total) {
      const next = await rest.jobs(`/api/v1/jobs?limit=1000&offset=${seen.length}`);
      expect(next.jobs.length).toBeGreaterThan(0);
      seen.push(...next.jobs.map((j) => j.id));
    }
    expect(new Set(seen).size).toBe(12);
    // Small jobs are not held back by the bound.
    const small = await startLocalJobNode();
    nodes.push(small);
    const smallRest = new Rest(small.url);
    for (let i = 0; i < 5; i++) await smallRest.post('/api/v1/jobs', nullJob());
    expect((await smallRest.jobs('/api/v1/jobs?limit=1000')).jobs).toHaveLength(5);
  });
});

describe('default resources', () => {
  let rest: Rest;
  beforeAll(async () => {
    const node = await startLocalJobNode({ jobs: { default_resources: { cores: 0.25, memory_bytes: 48 * MiB } } });
    nodes.push(node);
    rest = new Rest(node.url);
  });

  it('gives a job asking for zero cores and memory the defaults, and holds them against the share while it runs', async () => {
    const before = (await rest.get('/api/v1/resources/usage')).body;
    const job = await rest.submit(nullJob({ cores: 0, memory: 0, durationMs: 60_000 }));
    expect(job.resources).toEqual({ cpu: { cores: 0.25 }, memory: { size: 48 * MiB }, storage: { size: 0 } });
    await rest.waitFor(job.id, ['running']);
    const during = (await rest.get('/api/v1/resources/usage')).body;
    expect(during.allocated.cpu.cores).toBeCloseTo(before.allocated.cpu.cores + 0.25);
    expect(during.allocated.memory.size).toBe(before.allocated.memory.size + 48 * MiB);
    await rest.delete(`/api/v1/jobs/${job.id}`);
    expect((await rest.get('/api/v1/resources/usage')).body).toEqual(before);
  });

  it('keeps a zero-resource job waiting when the share is used up instead of running it outside the share', async () => {
    await rest.put('/api/v1/device/config', { onboarded: { cpu: { cores: 1 }, memory: { size: 512 * MiB } } });
    try {
      const hog = await rest.post('/api/v1/allocations', { resources: { cpu: { cores: 1 }, memory: { size: 0 } } });
      const job = await rest.submit(nullJob({ cores: 0, memory: 0 }));
      const waiting = await until('the pending reason', async () => {
        const j = await rest.job(job.id);
        return j.pending_reason ? j : undefined;
      });
      expect(waiting.pending_reason).toBe('waiting for resources: not enough cpu: 0.25 cores asked, 0 cores free of 1 core onboarded');
      await rest.delete(`/api/v1/allocations/${hog.body.id}`);
      expect(await rest.waitFor(job.id)).toMatchObject({ status: 'completed' });
    } finally {
      await rest.put('/api/v1/device/config', { onboarded: null });
    }
  });
});

describe('environment secrets and file modes', () => {
  let node: LocalNode;
  let adminKey: string;
  let viewerKey: string;
  beforeAll(async () => {
    const home = tempHome();
    // Keys are minted into the home before the node starts, as `dms keys create` would.
    adminKey = createApiKey(apiKeysPath(home), 'admin', 'admin').key;
    viewerKey = createApiKey(apiKeysPath(home), 'viewer', 'viewer').key;
    node = await startLocalNode({ home, config: { network: { enabled: false }, auth: { api_key_enabled: true }, jobs: { stop_grace_s: 1 } } });
    nodes.push(node);
  });

  const as = (key: string) => async (method: string, path: string, body?: unknown) => {
    const res = await fetch(node.url + path, {
      method,
      headers: { 'x-api-key': key, ...(body ? { 'content-type': 'application/json' } : {}) },
      body: body ? JSON.stringify(body) : undefined,
    });
    return { status: res.status, body: await res.json() };
  };

  it('shows environment values to admins and "[redacted]" to viewers, on one job and in lists', async () => {
    const admin = as(adminKey);
    const viewer = as(viewerKey);
    const spec = { ...nullJob({ stdout: 'x' }), environment: { ...nullJob({ stdout: 'x' }).environment, API_TOKEN: 's3cret' } };
    const created = await admin('POST', '/api/v1/jobs', spec);
    expect(created.status).toBe(201);
    expect(created.body.environment.API_TOKEN).toBe('s3cret');
    expect((await admin('GET', `/api/v1/jobs/${created.body.id}`)).body.environment.API_TOKEN).toBe('s3cret');

    const one = await viewer('GET', `/api/v1/jobs/${created.body.id}`);
    expect(one.status).toBe(200);
    expect(one.body.environment).toEqual({ DMS_NULL_STDOUT: '[redacted]', API_TOKEN: '[redacted]' });
    const list = await viewer('GET', '/api/v1/jobs?limit=1000');
    expect(list.status).toBe(200);
    const listed = list.body.find((j: Job) => j.id === created.body.id);
    expect(listed.environment).toEqual({ DMS_NULL_STDOUT: '[redacted]', API_TOKEN: '[redacted]' });
    expect(JSON.stringify(list.body)).not.toContain('s3cret');
  });

  it('creates dms.sqlite and its -wal and -shm files readable by the owner only', async () => {
    for (const file of ['dms.sqlite', 'dms.sqlite-wal', 'dms.sqlite-shm']) {
      expect((statSync(join(node.home, file)).mode & 0o777).toString(8), file).toBe('600');
    }
  });
});

describe('device settings a profile cannot carry', () => {
  let node: LocalNode;
  let rest: Rest;
  beforeAll(async () => {
    node = await startLocalJobNode();
    nodes.push(node);
    rest = new Rest(node.url);
  });

  /** This node's profile as a peer asking /public/describe gets it, and whether the peer keeps it (NodeProfile). */
  const published = async () => {
    const caller = await testActor(node.node.system, { inbox: `asker-${Math.random().toString(36).slice(2)}` });
    const profile = await caller.call(caller.local('root'), DiscoveryBehaviors.describe, {}, z.unknown());
    return NodeProfile.safeParse(profile);
  };

  it('refuses labels, name and location that would make the profile larger than peers keep, naming the size', async () => {
    // Each label within its bounds (32 of them, names of 63, values of 200): 8.6 KiB of JSON together.
    const labels = Object.fromEntries(Array.from({ length: 32 }, (_, i) => [`k${String(i).padStart(2, '0')}${'x'.repeat(60)}`, 'v'.repeat(200)]));
    const answer = await rest.put('/api/v1/device/config', { labels });
    expect(answer.status).toBe(400);
    expect(answer.body.error).toMatch(/name, location and labels: \d+ bytes of JSON, more than the 4096 a profile leaves them/);
    expect((await published()).success).toBe(true);
    // What fits is kept, and peers keep the profile that shows it.
    const fits = Object.fromEntries(Object.entries(labels).slice(0, 12));
    expect((await rest.put('/api/v1/device/config', { labels: fits, name: 'n'.repeat(200) })).status).toBe(200);
    const kept = await published();
    expect(kept.success, kept.error?.message).toBe(true);
    expect(Object.keys(kept.data!.labels)).toHaveLength(12);
  });
});
