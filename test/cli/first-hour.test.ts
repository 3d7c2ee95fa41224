// What a new user meets in the first hour, typed as they would type it, against a real node:
// dms alone, an unreachable node, --version, usage and --json errors, sizes with units, dms run,
// short ids, jobs describe, Ctrl-C while following, and cap revoke by the id `cap list` prints.
import { type ChildProcess, spawn } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Allocation, Job } from '../../behaviors/jobs/schema.js';
import { CLI, type NodeProcess, removeHome, runCli, TEST_ENV, tempHome } from '../helpers/node.js';
import { type JobNodeScene, jobNodeScene, MiB, nullJob, type Rest, startJobNode, until } from '../jobs/helpers.js';
import { freePort } from './helpers.js';

let scene: JobNodeScene<NodeProcess> | undefined;
let node: NodeProcess;
let rest: Rest;
const homes: string[] = [];
const dms = (...args: string[]) => runCli(['--home', node.home, ...args]);
const UUID = /[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}/;
const VERSION = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')).version as string;
/** `dms run` of a null-executor job: small, and runs without Docker. */
const NULL_RUN = ['run', 'none', '--executor', 'null', '--cpu', '0.1', '--memory', '16MiB'];

beforeAll(async () => void ({ node, rest } = scene = await jobNodeScene(startJobNode)));
afterAll(async () => {
  await scene?.stop();
  homes.forEach(removeHome);
});

function home(): string {
  const h = tempHome('dms-first-hour-');
  homes.push(h);
  return h;
}

/** Exactly one line on stderr, nothing on stdout, a non-zero exit. */
function oneLineFailure(r: { code: number | null; stdout: string; stderr: string }): string {
  expect(r.code).not.toBe(0);
  expect(r.stdout).toBe('');
  const lines = r.stderr.replace(/\n$/, '').split('\n');
  expect(lines, r.stderr).toHaveLength(1);
  return lines[0];
}

/** A CLI process whose output can be waited on while it runs. */
function spawnCli(args: string[]) {
  const child: ChildProcess = spawn(process.execPath, [CLI, '--home', node.home, ...args], {
    env: { ...process.env, ...TEST_ENV },
    stdio: ['ignore', 'pipe', 'pipe'],
    cwd: tmpdir(),
  });
  let stdout = '';
  let stderr = '';
  child.stdout!.on('data', (d) => (stdout += d));
  child.stderr!.on('data', (d) => (stderr += d));
  const exit = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  return { child, exit, out: () => stdout, err: () => stderr };
}

describe('dms alone, --version, and a node that is not there', () => {
  it('dms alone prints what one can do, and exits 0', async () => {
    const r = await runCli(['--home', home()]);
    expect(r.code, r.stderr).toBe(0);
    for (const cmd of ['dms start', 'dms run', 'dms jobs list', 'dms jobs describe', 'dms status']) expect(r.stdout).toContain(cmd);
    expect(r.stdout).toContain('dms --help');
    expect(r.stdout.split('\n').length).toBeLessThan(25);
  });

  it('dms --version prints the package version', async () => {
    const r = await runCli(['--version']);
    expect(r).toMatchObject({ code: 0, stdout: `${VERSION}\n` });
  });

  it('an unreachable node: says which URL and home it tried, and how to fix it', async () => {
    const h = home();
    const port = await freePort();
    writeFileSync(join(h, 'dms_config.json'), JSON.stringify({ rest: { port } }));
    const line = oneLineFailure(await runCli(['--home', h, 'jobs', 'list']));
    expect(line).toContain(`http://127.0.0.1:${port}`);
    expect(line).toContain(`home ${h}`);
    expect(line).toContain('start one with `dms start`, or pick another with --home');
  });
});

describe('usage and --json errors', () => {
  it('an unknown option or a missing argument is one line pointing at the command\'s help', async () => {
    const unknown = oneLineFailure(await dms('jobs', 'list', '--nope'));
    expect(unknown).toMatch(/^dms: unknown option '--nope'.*; see `dms jobs list --help`$/);
    const missing = oneLineFailure(await dms('jobs', 'status'));
    expect(missing).toBe("dms: missing required argument 'id'; see `dms jobs status --help`");
    const command = oneLineFailure(await dms('jbos'));
    expect(command).toMatch(/^dms: unknown command 'jbos'.*; see `dms --help`$/);
  });

  it('with --json, every error is {"error": …} on one stderr line', async () => {
    const notFound = oneLineFailure(await dms('--json', 'jobs', 'status', '00000000-0000-4000-8000-000000000000'));
    expect(JSON.parse(notFound)).toEqual({ error: 'job 00000000-0000-4000-8000-000000000000 not found (HTTP 404)' });
    const usage = oneLineFailure(await dms('--json', 'jobs', 'status'));
    expect(JSON.parse(usage)).toEqual({ error: "missing required argument 'id'; see `dms jobs status --help`" });
    const size = oneLineFailure(await dms('--json', 'allocations', 'create', '--cpu', '1', '--memory', '512'));
    expect(JSON.parse(size)).toEqual({ error: '--memory: 512 has no unit; write 512MiB or 512MB' });
  });
});

describe('sizes on the command line', () => {
  it('refuses a bare number for memory or storage, with the units to add', async () => {
    expect(oneLineFailure(await dms('allocations', 'create', '--cpu', '1', '--memory', '512'))).toBe('dms: --memory: 512 has no unit; write 512MiB or 512MB');
    expect(oneLineFailure(await dms('allocations', 'create', '--cpu', '1', '--memory', '1MiB', '--disk', '10'))).toBe(
      'dms: --disk: 10 has no unit; write 10MiB or 10MB',
    );
    expect(oneLineFailure(await dms(...NULL_RUN.slice(0, -1), '512'))).toBe('dms: --memory: 512 has no unit; write 512MiB or 512MB');
  });

  it('reads decimal and binary units and prints sizes in the units it reads', async () => {
    const created = await dms('--json', 'allocations', 'create', '--cpu', '0.1', '--memory', '0.5gib', '--disk', '1GB');
    expect(created.code, created.stderr).toBe(0);
    const allocation = JSON.parse(created.stdout) as Allocation;
    expect(allocation.resources).toMatchObject({ memory: { size: 512 * MiB }, storage: { size: 1e9 } });
    const listed = await dms('allocations', 'list');
    expect(listed.stdout).toMatch(new RegExp(`${allocation.id.slice(0, 8)}\\s+0.1 cores\\s+512 MiB\\s+953.7 MiB`));
    expect((await dms('allocations', 'release', allocation.id)).code).toBe(0);
  });
});

describe('dms run', () => {
  it('runs a job in one line: follows its output and exits with its exit code', async () => {
    const ok = await dms(...NULL_RUN, '--env', 'DMS_NULL_STDOUT=hello\nworld', '--name', 'greeting');
    expect(ok.code, ok.stderr).toBe(0);
    expect(ok.stdout).toBe('hello\nworld\n');
    expect(ok.stderr).toMatch(new RegExp(`^\\[dms\\] submitted job ${UUID.source} \\(greeting\\)\\n`));

    const failed = await dms(...NULL_RUN, '--env', 'DMS_NULL_EXIT_CODE=4', '--env', 'DMS_NULL_STDERR=bad input');
    expect(failed.code).toBe(4);
    expect(failed.stderr).toContain('bad input\n');
    expect(failed.stderr).toMatch(/failed \(exit code 4\): exited with code 4\n$/);

    const unstartable = await dms(...NULL_RUN, '--env', 'DMS_NULL_START_ERROR=no such image');
    expect(unstartable.code).toBe(1);
    expect(unstartable.stderr).toMatch(/failed: no such image\n$/);
  });

  it('builds the spec from its flags: image, command, cpu, memory, env, timeout, executor, name', async () => {
    const r = await dms(...NULL_RUN, '--env', 'A=1', '--env', 'B=x=y', '--timeout', '30', '--name', 'built', '--id-only', 'sh', '-c', 'echo hi');
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toMatch(new RegExp(`^${UUID.source}\\n$`));
    const job = await rest.job(r.stdout.trim());
    expect(job).toMatchObject({
      name: 'built',
      image: 'none',
      command: ['sh', '-c', 'echo hi'],
      environment: { A: '1', B: 'x=y' },
      resources: { cpu: { cores: 0.1 }, memory: { size: 16 * MiB } },
      executor: 'null',
      timeout_s: 30,
    });
  });

  it('defaults to 1 core and 512 MiB, and says so in --help', async () => {
    const r = await dms('run', 'none', '--executor', 'null', '--detach');
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toMatch(new RegExp(`^submitted job ${UUID.source} \\(none\\): pending\\n$`));
    const job = await rest.job(UUID.exec(r.stdout)![0]);
    expect(job.resources).toMatchObject({ cpu: { cores: 1 }, memory: { size: 512 * MiB } });
    const help = await dms('run', '--help');
    expect(help.stdout).toMatch(/--cpu <cores>\s+.*default 1/);
    expect(help.stdout).toMatch(/--memory <size>\s+.*default 512MiB/);
  });

  it('--wait prints no output, waits for the end and exits with the job\'s code', async () => {
    const ok = await dms(...NULL_RUN, '--wait', '--env', 'DMS_NULL_STDOUT=not shown', '--env', 'DMS_NULL_DURATION_MS=300');
    expect(ok.code, ok.stderr).toBe(0);
    expect(ok.stdout).toBe('');
    const failed = await dms(...NULL_RUN, '--wait', '--id-only', '--env', 'DMS_NULL_EXIT_CODE=2');
    expect(failed.code).toBe(2);
    expect(failed.stdout).toMatch(new RegExp(`^${UUID.source}\\n$`));
    expect((await rest.job(failed.stdout.trim())).status).toBe('failed');
  });

  it('refuses flags it cannot use, in one line', async () => {
    expect(oneLineFailure(await dms(...NULL_RUN, '--env', 'NOVALUE'))).toBe("dms: --env: 'NOVALUE' is not NAME=value");
    expect(oneLineFailure(await dms(...NULL_RUN, '--timeout', 'soon'))).toBe("dms: --timeout: 'soon' is not a whole number of seconds above 0");
    expect(oneLineFailure(await dms(...NULL_RUN, '--detach', '--wait'))).toMatch(/^dms: option '-d, --detach' cannot be used with option '--wait'; see `dms run --help`$/);
  });

  it('jobs submit takes --id-only and --wait too', async () => {
    const spec = join(node.home, 'exit5.json');
    writeFileSync(spec, JSON.stringify(nullJob({ stdout: 'quiet', exitCode: 5 })));
    const idOnly = await dms('jobs', 'submit', spec, '--id-only');
    expect(idOnly.code, idOnly.stderr).toBe(0);
    expect(idOnly.stdout).toMatch(new RegExp(`^${UUID.source}\\n$`));
    const waited = await dms('jobs', 'submit', spec, '--wait');
    expect(waited.code).toBe(5);
    expect(waited.stdout).toBe('');
    expect(waited.stderr).toMatch(/failed \(exit code 5\): exited with code 5\n$/);
  });
});

describe('Ctrl-C while following a job', () => {
  // Every command the README says follows a job: run, jobs submit --follow|--wait, jobs logs --follow.
  for (const how of ['jobs logs --follow', 'run', 'jobs submit --follow', 'jobs submit --wait'] as const) {
    it(`${how}: leaves the job running, says so and how to stop it, exits 130`, async () => {
      let id: string;
      let proc: ReturnType<typeof spawnCli>;
      if (how === 'jobs logs --follow') {
        id = (await rest.submit(nullJob({ stdout: 'started', durationMs: 60_000 }))).id;
        proc = spawnCli(['jobs', 'logs', id, '--follow']);
        await until('the output to be followed', async () => proc.out().includes('started'));
      } else {
        if (how === 'run') proc = spawnCli([...NULL_RUN, '--env', 'DMS_NULL_STDOUT=started', '--env', 'DMS_NULL_DURATION_MS=60000']);
        else {
          const spec = join(node.home, 'ctrl-c.json');
          writeFileSync(spec, JSON.stringify(nullJob({ stdout: 'started', durationMs: 60_000 })));
          proc = spawnCli(['jobs', 'submit', spec, how.endsWith('--wait') ? '--wait' : '--follow']);
        }
        // The id is on stderr once submitted; Ctrl-C once the job runs.
        id = await until('the job to be submitted', async () => UUID.exec(proc.err())?.[0]);
        await until('the job to run', async () => (await rest.job(id)).status === 'running');
        if (how !== 'jobs submit --wait') await until('the output to be followed', async () => proc.out().includes('started'));
      }
      proc.child.kill('SIGINT');
      expect(await proc.exit).toBe(130);
      expect(proc.err()).toContain(`job ${id} keeps running; \`dms jobs cancel ${id}\` stops it\n`);
      expect((await rest.job(id)).status).toBe('running');
      await rest.delete(`/api/v1/jobs/${id}`);
    });
  }
});

describe('short ids', () => {
  it('any unique prefix of a job id works; ambiguous and unknown ones are refused', async () => {
    // Enough jobs that two ids share a first character (16 hex digits: 17 guarantee it).
    const jobs: Job[] = [];
    for (let i = 0; i < 17; i++) jobs.push(await rest.submit(nullJob({ stdout: `job ${i}` })));
    for (const j of jobs) await rest.waitFor(j.id);
    const job = jobs[0];

    const status = await dms('jobs', 'status', job.id.slice(0, 6));
    expect(status.code, status.stderr).toBe(0);
    expect(status.stdout).toContain(`id        ${job.id}\n`);
    expect((await dms('jobs', 'logs', job.id.slice(0, 8))).stdout).toBe('job 0\n');

    const all = JSON.parse((await dms('--json', 'jobs', 'list', '--limit', '1000', '--oldest-first')).stdout) as Job[];
    const first = jobs.map((j) => j.id[0]).find((c, i, cs) => cs.indexOf(c) !== i)!;
    const sharing = all.filter((j) => j.id.startsWith(first)).map((j) => j.id);
    const ambiguous = oneLineFailure(await dms('jobs', 'status', first));
    expect(ambiguous).toBe(`dms: '${first}' matches ${sharing.length} jobs: ${sharing.join(', ')}; give more characters`);
    expect(oneLineFailure(await dms('jobs', 'cancel', 'zz'))).toBe("dms: no job id starts with 'zz'");
  });

  it('lists print the first 8 characters; --wide and --json the whole id', async () => {
    const job = await rest.submit(nullJob({ name: 'listed' }));
    await rest.waitFor(job.id);
    const list = await dms('jobs', 'list');
    expect(list.stdout).toMatch(new RegExp(`\\n${job.id.slice(0, 8)}\\s+completed\\s+null\\s+…\\S{8}\\s+0\\s+\\S+\\s+listed\\n`));
    expect(list.stdout).not.toContain(job.id);
    expect((await dms('jobs', 'list', '--wide')).stdout).toMatch(new RegExp(`\\n${job.id}\\s+completed`));
    expect((await dms('--json', 'jobs', 'list', '--limit', '1000')).stdout).toContain(`"id": "${job.id}"`);
  });

  it('works for allocations and API keys', async () => {
    const made = await dms('--json', 'allocations', 'create', '--cpu', '0.1', '--memory', '16MiB');
    const allocation = JSON.parse(made.stdout) as Allocation;
    const listed = await dms('allocations', 'list');
    expect(listed.stdout).toMatch(new RegExp(`\\n${allocation.id.slice(0, 8)}\\s+0.1 cores`));
    expect(listed.stdout).not.toContain(allocation.id);
    expect((await dms('allocations', 'list', '--wide')).stdout).toContain(allocation.id);
    const released = await dms('allocations', 'release', allocation.id.slice(0, 7));
    expect(released.code, released.stderr).toBe(0);
    expect(released.stdout).toMatch(new RegExp(`^allocation ${allocation.id} released at `));
    expect(oneLineFailure(await dms('allocations', 'release', 'zz'))).toBe("dms: no allocation id starts with 'zz'");

    const h = home();
    const key = await runCli(['--home', h, '--json', 'auth', 'apikey', 'create', '--role', 'viewer', '--name', 'ci']);
    const { id } = JSON.parse(key.stdout) as { id: string };
    const keys = await runCli(['--home', h, 'auth', 'apikey', 'list']);
    expect(keys.stdout).toMatch(new RegExp(`^${id.slice(0, 8)}\\s+viewer`));
    expect(keys.stdout).not.toContain(id);
    expect((await runCli(['--home', h, 'auth', 'apikey', 'list', '--wide'])).stdout).toContain(id);
    const revoked = await runCli(['--home', h, 'auth', 'apikey', 'revoke', id.slice(0, 5)]);
    expect(revoked).toMatchObject({ code: 0, stdout: `API key ${id} revoked\n` });
  });
});

describe('dms jobs describe', () => {
  it('shows the whole job as a person reads it', async () => {
    const done = await dms(...NULL_RUN, '--env', 'DMS_NULL_EXIT_CODE=3', '--name', 'described', '--timeout', '60', 'sh', '-c', 'exit 3');
    expect(done.code).toBe(3);
    const id = UUID.exec(done.stderr)![0];
    const job = await rest.job(id);
    const r = await dms('jobs', 'describe', id.slice(0, 8));
    expect(r.code, r.stderr).toBe(0);
    const expected: [string, string][] = [
      ['id', id],
      ['name', 'described'],
      ['image', 'none'],
      ['command', "sh -c 'exit 3'"],
      ['executor', 'null'],
      ['status', 'failed'],
      ['node', node.peerId],
      ['exit code', '3'],
      ['error', 'exited with code 3'],
      ['resources', '0.1 cores, 16 MiB memory, 0 B storage'],
      ['environment', 'DMS_NULL_EXIT_CODE=3'],
      ['timeout', '60 s'],
      ['submitted', job.created_at],
      ['last change', job.updated_at],
    ];
    for (const [k, v] of expected) expect(r.stdout).toMatch(new RegExp(`^${k}\\s+${v.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}$`, 'm'));
    const json = await dms('--json', 'jobs', 'describe', id.slice(0, 8));
    expect(JSON.parse(json.stdout)).toMatchObject({ id, status: 'failed', exit_code: 3 });
  });
});

describe('dms cap revoke', () => {
  it('takes the id `cap list` prints, or any unique prefix of it', async () => {
    const h = home();
    expect((await runCli(['--home', h, 'init'])).code).toBe(0);
    const other = JSON.parse((await runCli(['--home', h, '--json', 'key', 'new', 'other'])).stdout).did as string;
    const grant = await runCli(['--home', h, '--json', 'cap', 'grant', other, '--cap', '/dms/node/peers/list']);
    expect(grant.code, grant.stderr).toBe(0);
    const fullId = JSON.parse(grant.stdout).id as string;
    const listed = (await runCli(['--home', h, 'cap', 'list'])).stdout;
    const shown = /^ {2}([0-9a-f]+) invoke /m.exec(listed)![1];
    expect(fullId.startsWith(shown)).toBe(true);

    expect(oneLineFailure(await runCli(['--home', h, 'cap', 'revoke', 'ffffffffffff0']))).toMatch(
      /^dms: no anchored token id starts with 'ffffffffffff0'/,
    );
    const revoked = await runCli(['--home', h, '--json', 'cap', 'revoke', shown]);
    expect(revoked.code, revoked.stderr).toBe(0);
    expect(JSON.parse(revoked.stdout)).toMatchObject({ revoked: fullId, dropped: 1 });
  });
});
