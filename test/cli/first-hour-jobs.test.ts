// The first hour with jobs, as a user types it, against a real node: job specs people can
// write (sizes with units, a command string, no resources at all), a job no node could ever
// hold refused at once, `jobs list` newest first saying how many more there are, and a job's
// whole history through GET /api/v1/jobs/{id}/events and `dms jobs describe`.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Job } from '../../behaviors/jobs/schema.js';
import { type NodeProcess, runCli } from '../helpers/node.js';
import { type JobNodeScene, jobNodeScene, MiB, nullJob, type Rest, startJobNode, until, specFile } from '../jobs/helpers.js';

let scene: JobNodeScene<NodeProcess> | undefined;
let node: NodeProcess;
let rest: Rest;
const dms = (...args: string[]) => runCli(['--home', node.home, ...args]);
const UUID = /[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}/;
/** What the machine has, as the node measured it. */
let capacity: { cpu: { cores: number }; memory: { size: number }; gpu?: { count: number } };

beforeAll(async () => {
  ({ node, rest } = scene = await jobNodeScene(startJobNode));
  capacity = (await rest.get('/api/v1/resources/usage')).body.capacity;
});
afterAll(() => scene?.stop());



describe('job specs people can write', () => {
  it('takes sizes with units, cores as a number, a command string, and the short resource form', async () => {
    const spec = specFile(
      node,
      'short.yaml',
      [
        'name: short-form',
        'image: none',
        'executor: "null"',
        'command: echo "hello world" && exit 0',
        'resources: {cpu: 0.5, memory: 64MiB, storage: 1GB}',
      ].join('\n'),
    );
    const r = await dms('jobs', 'submit', spec, '--id-only');
    expect(r.code, r.stderr).toBe(0);
    const job = await rest.job(r.stdout.trim());
    expect(job.command).toEqual(['sh', '-c', 'echo "hello world" && exit 0']);
    expect(job.resources).toEqual({ cpu: { cores: 0.5 }, memory: { size: 64 * MiB }, storage: { size: 1e9 } });
  });

  it('takes the long form with sizes as strings, and numbers as bytes as before', async () => {
    const long = await rest.post('/api/v1/jobs', { ...nullJob(), resources: { cpu: { cores: 0.25 }, memory: { size: '0.5GiB' }, storage: { size: 1024 } } });
    expect(long.status, JSON.stringify(long.body)).toBe(201);
    expect(long.body.resources).toEqual({ cpu: { cores: 0.25 }, memory: { size: 512 * MiB }, storage: { size: 1024 } });
    // The same forms hold wherever resources are written, allocations included.
    const allocation = await rest.post('/api/v1/allocations', { resources: { cpu: 0.1, memory: '16MiB' } });
    expect(allocation.status, JSON.stringify(allocation.body)).toBe(201);
    expect(allocation.body.resources).toEqual({ cpu: { cores: 0.1 }, memory: { size: 16 * MiB }, storage: { size: 0 } });
    expect((await rest.delete(`/api/v1/allocations/${allocation.body.id}`)).status).toBe(200);
  });

  it('gives a spec without resources the documented defaults: 1 core, 512 MiB', async () => {
    const spec = specFile(node, 'bare.json', JSON.stringify({ name: 'bare', image: 'none', executor: 'null' }));
    const r = await dms('--json', 'jobs', 'submit', spec);
    expect(r.code, r.stderr).toBe(0);
    const job = JSON.parse(r.stdout) as Job;
    expect(job.resources).toEqual({ cpu: { cores: 1 }, memory: { size: 512 * MiB }, storage: { size: 0 } });
    expect(job.command).toEqual([]);
    expect((await rest.waitFor(job.id)).status).toBe('completed');
  });

  it('dms run --disk reserves the disk a job may write, in the units --memory takes', async () => {
    const r = await dms('run', '--executor', 'null', '--cpu', '0.25', '--memory', '32MiB', '--disk', '64MiB', '--wait', '--id-only', 'none');
    expect(r.code, r.stderr).toBe(0);
    expect((await rest.job(r.stdout.trim())).resources).toEqual({ cpu: { cores: 0.25 }, memory: { size: 32 * MiB }, storage: { size: 64 * MiB } });
    const bare = await dms('run', '--executor', 'null', '--disk', '64', 'none');
    expect({ code: bare.code, stderr: bare.stderr.trim() }).toEqual({ code: 1, stderr: 'dms: --disk: 64 has no unit; write 64MiB or 64MB' });
  });

  it('names the field and the accepted forms when a spec is wrong', async () => {
    const bad = async (spec: unknown) => {
      const answer = await rest.post('/api/v1/jobs', spec);
      expect(answer.status, JSON.stringify(answer.body)).toBe(400);
      return answer.body.error as string;
    };
    expect(await bad({ ...nullJob(), resources: { memory: '512' } })).toBe('invalid job spec: resources.memory.size: 512 has no unit; write 512MiB or 512MB');
    expect(await bad({ ...nullJob(), resources: { memory: '512M' } })).toBe(
      'invalid job spec: resources.memory.size: 512M is ambiguous; write 512MiB (powers of 1024) or 512MB (powers of 1000)',
    );
    expect(await bad({ ...nullJob(), resources: { memory: true } })).toBe(
      'invalid job spec: resources.memory: a size: bytes as a whole number, or a string with a unit ("512MiB", "2GB"); or {"size": one of those}',
    );
    expect(await bad({ ...nullJob(), resources: { memory: { size: 1.5 } } })).toBe(
      'invalid job spec: resources.memory.size: a size: bytes as a whole number, or a string with a unit ("512MiB", "2GB")',
    );
    // A negative number is a number: what is wrong with it is its sign.
    expect(await bad({ ...nullJob(), resources: { memory: { size: -1 } } })).toBe('invalid job spec: resources.memory.size: -1 is negative: a size is 0 bytes or more');
    expect(await bad({ ...nullJob(), resources: { cpu: -1 } })).toBe('invalid job spec: resources.cpu.cores: -1 is negative: cores are 0 or more');
    expect(await bad({ ...nullJob(), resources: { cpu: 'two' } })).toBe('invalid job spec: resources.cpu: cores as a number (0.5, 2) or {"cores": a number}');
    expect(await bad({ ...nullJob(), command: 3 })).toBe('invalid job spec: command: a string (run as sh -c <string>) or an array of strings');
    expect(await bad({ ...nullJob(), command: ['echo', 3] })).toBe('invalid job spec: command.1: a string (run as sh -c <string>) or an array of strings');

    const unit = await dms('jobs', 'submit', specFile(node, 'badunit.yaml', 'name: x\nimage: none\nresources: {memory: 2 gigs}\n'));
    expect(unit).toMatchObject({ code: 1, stdout: '' });
    expect(unit.stderr).toBe("dms: invalid job spec: resources.memory.size: 'gigs' is not a size unit (B, KB, MB, GB, TB, KiB, MiB, GiB, TiB) (HTTP 400)\n");
  });
});

describe('a job no node could ever hold', () => {
  it('is refused at submission with 409 naming the resource, and not stored', async () => {
    const before = (await rest.jobs()).total;
    const cores = await rest.post('/api/v1/jobs', { ...nullJob(), resources: { cpu: 1000 } });
    expect(cores).toEqual({
      status: 409,
      body: { error: `needs 1000 cores; this node has at most ${capacity.cpu.cores} (no known node could hold it)` },
    });
    const memory = await rest.post('/api/v1/jobs', { ...nullJob(), resources: { memory: '64TiB' } });
    expect(memory.status).toBe(409);
    expect(memory.body.error).toMatch(/^needs 64 TiB of memory; this node has at most \d+(\.\d)? [GMT]iB \(no known node could hold it\)$/);
    if (!capacity.gpu) {
      const gpu = await rest.post('/api/v1/jobs', { ...nullJob(), resources: { gpu: 1 } });
      expect(gpu).toEqual({ status: 409, body: { error: 'needs 1 GPU; this node has none (no known node could hold it)' } });
    }
    expect((await rest.jobs()).total).toBe(before);
  });

  it('dms run says so in one line', async () => {
    const r = await dms('run', 'none', '--executor', 'null', '--cpu', '1000');
    expect(r).toMatchObject({ code: 1, stdout: '' });
    expect(r.stderr).toBe(`dms: needs 1000 cores; this node has at most ${capacity.cpu.cores} (no known node could hold it) (HTTP 409)\n`);
  });

  it('a job that could fit once resources free up is accepted and waits, saying why', async () => {
    await rest.put('/api/v1/device/config', { onboarded: { cpu: 0.25, memory: '64MiB' } });
    try {
      const job = await rest.submit({ ...nullJob(), resources: { cpu: 0.5, memory: '16MiB' } });
      const waiting = await until('a pending reason', async () => {
        const j = await rest.job(job.id);
        return j.pending_reason ? j : undefined;
      });
      expect(waiting).toMatchObject({
        status: 'pending',
        pending_reason: 'waiting for resources: not enough cpu: 0.5 cores asked, 0.25 cores free of 0.25 cores onboarded',
      });
      // What a user sees: `dms jobs status` (and describe) says why it waits.
      for (const cmd of ['status', 'describe']) {
        const shown = await dms('jobs', cmd, job.id.slice(0, 8));
        expect(shown.code, shown.stderr).toBe(0);
        expect(shown.stdout).toMatch(/^status\s+pending$/m);
        expect(shown.stdout).toMatch(/^waiting\s+waiting for resources: not enough cpu: 0\.5 cores asked, 0\.25 cores free of 0\.25 cores onboarded$/m);
      }
      await rest.put('/api/v1/device/config', { onboarded: null });
      expect((await rest.waitFor(job.id)).status).toBe('completed');
    } finally {
      await rest.put('/api/v1/device/config', { onboarded: null });
    }
  });
});

describe('jobs list', () => {
  it('REST: newest first with the total; ?order=asc for oldest first', async () => {
    const ids: string[] = [];
    for (let i = 0; i < 3; i++) ids.push((await rest.submit(nullJob({ name: `order-${i}` }))).id);
    for (const id of ids) await rest.waitFor(id);
    // The body is the list the REST contract promises; the total is the X-Total-Count header.
    const { status, body } = await rest.get<Job[]>('/api/v1/jobs?limit=3');
    expect(status).toBe(200);
    expect(body.map((j) => j.id)).toEqual([...ids].reverse());
    const all = await rest.jobs('/api/v1/jobs?limit=1000');
    expect(all.total).toBe(all.jobs.length);
    const asc = await rest.jobs('/api/v1/jobs?limit=1000&order=asc');
    expect(asc.jobs.map((j) => j.id)).toEqual(all.jobs.map((j) => j.id).reverse());
    const completed = await rest.jobs('/api/v1/jobs?status=completed&limit=1');
    expect(completed.jobs).toHaveLength(1);
    expect(completed.total).toBe(all.jobs.filter((j) => j.status === 'completed').length);
    expect((await rest.get('/api/v1/jobs?order=sideways')).body).toEqual({ error: "order: 'sideways' is not asc or desc" });
  });

  it('dms jobs list: newest first, says how many more there are, --all shows them all', async () => {
    const total = (await rest.jobs()).total;
    const newest = await rest.submit(nullJob({ name: 'the-newest' }));
    await rest.waitFor(newest.id);
    const page = await dms('jobs', 'list', '--limit', '2');
    expect(page.code, page.stderr).toBe(0);
    const rows = page.stdout.trim().split('\n');
    expect(rows).toHaveLength(3);
    expect(rows[1]).toMatch(new RegExp(`^${newest.id.slice(0, 8)}\\s+completed\\s+null\\s+…\\S{8}\\s+0\\s+\\S+\\s+the-newest$`));
    expect(page.stderr).toBe(`${total + 1 - 2} more; use --limit/--offset (or --all)\n`);

    const all = await dms('jobs', 'list', '--all');
    expect(all.code, all.stderr).toBe(0);
    expect(all.stdout.trim().split('\n')).toHaveLength(total + 2);
    expect(all.stderr).toBe('');

    // --json prints what REST answers: the list.
    const json = JSON.parse((await dms('--json', 'jobs', 'list', '--limit', '1')).stdout) as Job[];
    expect(json.map((j) => j.id)).toEqual([newest.id]);
  });
});

describe("a job's history", () => {
  it('REST: GET /api/v1/jobs/{id}/events lists every stored transition', async () => {
    const job = await rest.submit(nullJob({ exitCode: 2 }));
    await rest.waitFor(job.id);
    const { status, body } = await rest.get(`/api/v1/jobs/${job.id}/events`);
    expect(status).toBe(200);
    expect(body.id).toBe(job.id);
    expect(body.events.map((e: { from: string | null; to: string; reason: string }) => [e.from, e.to, e.reason])).toEqual([
      [null, 'pending', 'submitted'],
      ['pending', 'running', 'started'],
      ['running', 'failed', 'exited with code 2'],
    ]);
    for (const e of body.events) expect(Object.keys(e).sort()).toEqual(['at', 'from', 'reason', 'to']);
    expect(Date.parse(body.events[0].at)).toBe(Date.parse(job.created_at));

    expect(await rest.get('/api/v1/jobs/00000000-0000-4000-8000-000000000000/events')).toEqual({
      status: 404,
      body: { error: 'job 00000000-0000-4000-8000-000000000000 not found' },
    });
    expect((await rest.get(`/api/v1/jobs/${'a'.repeat(200)}/events`)).status).toBe(400);
  });

  it('dms jobs describe prints the timeline, where it ran, its exit code and resources', async () => {
    const run = await dms('run', 'none', '--executor', 'null', '--cpu', '0.25', '--memory', '32MiB', '--env', 'DMS_NULL_EXIT_CODE=3', '--wait', '--id-only');
    expect(run.code).toBe(3);
    const id = run.stdout.trim();
    expect(id).toMatch(UUID);
    const { body } = await rest.get(`/api/v1/jobs/${id}/events`);
    const r = await dms('jobs', 'describe', id.slice(0, 8));
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toMatch(new RegExp(`^node\\s+${node.peerId}$`, 'm'));
    expect(r.stdout).toMatch(/^exit code\s+3$/m);
    expect(r.stdout).toMatch(/^resources\s+0.25 cores, 32 MiB memory, 0 B storage$/m);
    const history = r.stdout.slice(r.stdout.indexOf('\nhistory\n') + 1).split('\n');
    expect(history[0]).toBe('history');
    // time, status change, reason: the change column as wide as its widest entry.
    expect(history.slice(1, 5)).toEqual([
      `  ${body.events[0].at}  pending            submitted`,
      `  ${body.events[1].at}  pending → running  started`,
      `  ${body.events[2].at}  running → failed   exited with code 3`,
      '',
    ]);
    const json = JSON.parse((await dms('--json', 'jobs', 'describe', id)).stdout);
    expect(json).toMatchObject({ id, status: 'failed', exit_code: 3 });
    expect(json.events).toEqual(body.events);
  });

  it('dms jobs describe says what a job reads and what it left, and names its secrets without their values; run says where its outputs are, jobs get fetches them', async () => {
    const dir = specFile(node, 'in.txt', 'read me\n');
    const put = await dms('put', dir);
    expect(put.code, put.stderr).toBe(0);
    const cid = put.stdout.trim();
    const files = JSON.stringify({ '/outputs/a.txt': 'left behind' });
    const r = await dms(
      'run', 'none', '--executor', 'null', '--cpu', '0.25', '--memory', '32MiB', '--wait', '--id-only',
      '-i', `${cid}:/inputs/in.txt`, '-o', 'out:/outputs', '-o', 'gone:/nowhere.txt', '--secret', 'TOKEN=hunter2', '-e', `DMS_NULL_FILES=${files}`,
    );
    expect(r.code, r.stderr).toBe(0);
    const id = r.stdout.trim();
    const job = await rest.job(id);
    const out = job.outputs.find((o) => o.name === 'out')!;
    expect(out.cid).toBeDefined();
    const d = await dms('jobs', 'describe', id);
    expect(d.code, d.stderr).toBe(0);
    expect(d.stdout).toMatch(new RegExp(`^inputs\\s+${cid} → /inputs/in.txt$`, 'm'));
    expect(d.stdout).toMatch(new RegExp(`^outputs\\s+out ← /outputs: ${out.cid}, ${out.size} B$`, 'm'));
    expect(d.stdout).toMatch(/^\s+gone ← \/nowhere\.txt: not collected: .+$/m);
    expect(d.stdout).toMatch(/^secrets\s+TOKEN \(value not shown\)$/m);
    expect(d.stdout).not.toContain('hunter2');
    expect(d.stdout).toMatch(/^manifest\s+signed by the node that ran it/m);
    // The run itself said where its outputs are, and how to fetch them.
    expect(r.stderr).toContain(`[dms] output out: ${out.cid} (${out.size} B)\n`);
    expect(r.stderr).toMatch(/\[dms\] output gone not collected: .+\n/);
    expect(r.stderr).toContain(`[dms] \`dms jobs get ${id.slice(0, 8)}\` writes them to ./${id.slice(0, 8)}/<name>`);
    // ... which takes the folder as a second word too.
    const into = join(node.home, 'fetched');
    const got = await dms('jobs', 'get', id.slice(0, 8), into, '--name', 'out');
    expect(got.code, got.stderr).toBe(0);
    expect(readFileSync(join(into, 'out', 'a.txt'), 'utf8')).toBe('left behind');
    const both = await dms('jobs', 'get', id.slice(0, 8), into, '--output-dir', join(node.home, 'elsewhere'));
    expect(both.code).toBe(1);
    expect(both.stderr).toContain('two places to write to');
  });
});
