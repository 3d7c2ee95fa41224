// Query parameters through a real node (in this process): every boolean takes the same spellings,
// a parameter given twice is refused rather than read as its first value, and an empty value is
// refused where it means nothing. Found by a prober on a running node: `logs?follow=yes` answered
// one page, `?limit=5&limit=7` took 5, and `?status=` listed every job.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { LocalNode } from '../helpers/local-node.js';
import { type JobNodeScene, jobNodeScene, nullJob, type Rest, startLocalJobNode } from '../jobs/helpers.js';

let scene: JobNodeScene<LocalNode> | undefined;
let rest: Rest;
let url: string;
let job: string;

beforeAll(async () => {
  ({ rest } = scene = await jobNodeScene(startLocalJobNode));
  url = scene.node.url;
  job = (await rest.submit(nullJob({ name: 'query-params', stdout: 'hello' }))).id;
  await rest.waitFor(job, ['completed']);
});
afterAll(() => scene?.stop());

/** A 400 and its error text. */
async function refused(path: string, method = 'GET'): Promise<string> {
  const res = await fetch(url + path, { method });
  const body = await res.text();
  expect([path, res.status]).toEqual([path, 400]);
  return (JSON.parse(body) as { error: string }).error;
}

const SPELLINGS = '(accepted: true, 1, false, 0)';

describe('boolean query parameters', () => {
  // Where each boolean is read: follow and previous on a job's logs, all on the allocations.
  const booleans = (value: string) => [
    ['follow', `/api/v1/jobs/${job}/logs?follow=${value}`],
    ['previous', `/api/v1/jobs/${job}/logs?previous=${value}`],
    ['all', `/api/v1/allocations?all=${value}`],
  ];

  it('follow, previous and all refuse anything but true, 1, false and 0, naming the parameter and the spellings', async () => {
    for (const bad of ['yes', 'no', 'on', 'TRUE', 'True', '2', ' true', '']) {
      for (const [name, path] of booleans(encodeURIComponent(bad))) {
        expect(await refused(path)).toBe(`${name}: '${bad}' is not true or false ${SPELLINGS}`);
      }
    }
  });

  it('follow: true and 1 follow (server-sent events to the end), false and 0 answer one page', async () => {
    for (const yes of ['true', '1']) {
      const events = await rest.events(`/api/v1/jobs/${job}/logs?follow=${yes}`);
      expect(events.at(-1)).toMatchObject({ event: 'end', data: { id: job, status: 'completed' } });
    }
    for (const no of ['false', '0']) {
      const page = await rest.get(`/api/v1/jobs/${job}/logs?follow=${no}`);
      expect(page.status).toBe(200);
      expect(page.body).toMatchObject({ id: job, done: true });
    }
  });

  it('previous: true and 1 ask for the run before (none kept: 404), false and 0 read the current run', async () => {
    for (const yes of ['true', '1']) expect((await rest.get(`/api/v1/jobs/${job}/logs?previous=${yes}`)).status).toBe(404);
    for (const no of ['false', '0']) expect(await rest.get(`/api/v1/jobs/${job}/logs?previous=${no}`)).toMatchObject({ status: 200, body: { id: job } });
  });

  it('all: true, 1, false and 0 are each taken', async () => {
    for (const value of ['true', '1', 'false', '0']) expect((await rest.get(`/api/v1/allocations?all=${value}`)).status).toBe(200);
  });
});

describe('a query parameter given more than once', () => {
  it('is refused on every route that reads a query, naming it, whether the values differ or not', async () => {
    const cases: [string, string, string?][] = [
      ['limit', '/api/v1/jobs?limit=5&limit=7'],
      ['order', '/api/v1/jobs?order=asc&order=desc'],
      ['status', '/api/v1/jobs?status=running&status=running'],
      ['offset', '/api/v1/jobs?offset=0&limit=1&offset=1'],
      ['follow', `/api/v1/jobs/${job}/logs?follow=false&follow=true`],
      ['from', `/api/v1/jobs/${job}/logs?from=0&from=1`],
      ['limit', `/api/v1/jobs/${job}/logs?limit=1&limit=1`],
      ['all', '/api/v1/allocations?all=true&all=false'],
      ['limit', '/api/v1/ensembles?limit=1&limit=2'],
      ['reason', `/api/v1/jobs/${job}?reason=a&reason=b`, 'DELETE'],
    ];
    for (const [name, path, method] of cases) expect(await refused(path, method)).toBe(`${name}: given more than once`);
  });

  it('names every parameter given more than once', async () => {
    expect(await refused('/api/v1/jobs?limit=5&order=asc&limit=7&order=desc')).toBe('limit: given more than once; order: given more than once');
  });

  it('a parameter no route reads is ignored, once or more, as before', async () => {
    expect((await rest.get('/api/v1/jobs?colour=blue')).status).toBe(200);
    expect((await rest.get('/api/v1/jobs?colour=blue&colour=red&limit=1')).status).toBe(200);
    expect((await rest.get('/api/v1/allocations?x=1&x=2')).status).toBe(200);
  });
});

describe('an empty value', () => {
  it('status= is not a status: 400 naming it, not every job', async () => {
    expect(await refused('/api/v1/jobs?status=')).toBe("status: '' is not one of pending, running, completed, failed");
    expect(await refused('/api/v1/jobs?status=completed,')).toBe("status: '' is not one of pending, running, completed, failed");
  });

  it('is refused for the other parameters too, each named', async () => {
    expect(await refused('/api/v1/jobs?limit=')).toMatch(/^limit: '' is not a whole number/);
    expect(await refused('/api/v1/jobs?order=')).toBe("order: '' is not asc or desc");
    expect(await refused(`/api/v1/jobs/${job}/logs?follow=`)).toBe(`follow: '' is not true or false ${SPELLINGS}`);
    expect(await refused(`/api/v1/jobs/${job}/logs?from=`)).toMatch(/^from: '' is not a byte offset/);
  });

  it('the valid forms still answer', async () => {
    expect((await rest.jobs('/api/v1/jobs?status=completed&limit=1&offset=0&order=asc')).jobs.map((j) => j.id)).toEqual([job]);
    expect((await rest.jobs('/api/v1/jobs?status=pending,running')).total).toBe(0);
    expect((await rest.get(`/api/v1/jobs/${job}/logs?from=0&limit=100`)).status).toBe(200);
    expect((await rest.events(`/api/v1/jobs/${job}/logs?follow=true&from=end`)).at(-1)?.event).toBe('end');
    expect((await rest.get('/api/v1/ensembles?limit=1&offset=0')).status).toBe(200);
  });
});
