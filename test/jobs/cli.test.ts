// The built `dms jobs`, `dms resources` and `dms allocations` commands against a real node.
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Job } from '../../behaviors/jobs/schema.js';
import { type NodeProcess, runCli } from '../helpers/node.js';
import { type JobNodeScene, jobNodeScene, MiB, nullJob, type Rest, startJobNode, specFile } from './helpers.js';

let scene: JobNodeScene<NodeProcess> | undefined;
let node: NodeProcess;
let rest: Rest;
const dms = (...args: string[]) => runCli(['--home', node.home, ...args]);
const UUID = /[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}/;

beforeAll(async () => void ({ node, rest } = scene = await jobNodeScene(startJobNode)));
afterAll(() => scene?.stop());


describe('dms jobs', () => {
  it('submits a YAML spec, then shows its status, output and place in the list', async () => {
    const spec = specFile(
      node,
      'hello.yaml',
      [
        'name: from-yaml',
        'image: none',
        'executor: "null"',
        'environment:',
        '  DMS_NULL_STDOUT: "line one\\nline two"',
        '  DMS_NULL_STDERR: "a warning"',
        'resources:',
        '  cpu: {cores: 0.25}',
        `  memory: {size: ${32 * MiB}}`,
      ].join('\n'),
    );
    const submitted = await dms('jobs', 'submit', spec);
    expect(submitted.code, submitted.stderr).toBe(0);
    expect(submitted.stdout).toMatch(new RegExp(`^submitted job (${UUID.source}) \\(from-yaml\\): pending\\n$`));
    const id = UUID.exec(submitted.stdout)![0];
    await rest.waitFor(id);

    const status = await dms('jobs', 'status', id);
    expect(status.code).toBe(0);
    expect(status.stdout).toContain(`id        ${id}\n`);
    expect(status.stdout).toContain('status    completed\n');
    expect(status.stdout).toContain('exit code 0\n');
    const json = await dms('--json', 'jobs', 'status', id);
    expect(JSON.parse(json.stdout)).toMatchObject({ id, status: 'completed', name: 'from-yaml' });

    const logs = await dms('jobs', 'logs', id);
    expect(logs).toMatchObject({ code: 0, stdout: 'line one\nline two\n', stderr: 'a warning\n' });

    const list = await dms('jobs', 'list', '--status', 'completed');
    expect(list.code).toBe(0);
    expect(list.stdout.split('\n')[0]).toMatch(/^ID\s+STATUS\s+EXECUTOR\s+NODE\s+EXIT\s+CREATED\s+NAME$/);
    expect(list.stdout).toMatch(new RegExp(`${id.slice(0, 8)}\\s+completed\\s+null\\s+…\\S{8}\\s+0\\s+\\S+\\s+from-yaml`));
    expect((await dms('jobs', 'list', '--status', 'completed', '--wide')).stdout).toMatch(new RegExp(`${id}\\s+completed\\s+null\\s+12D3KooW\\S+\\s+0\\s+\\S+\\s+from-yaml`));
    const listed = JSON.parse((await dms('--json', 'jobs', 'list', '--limit', '1000')).stdout) as Job[];
    expect(listed.map((j) => j.id)).toContain(id);
  });

  it('submit --follow prints the output as it comes and exits with the job\'s exit code', async () => {
    const spec = specFile(node, 'exit3.json', JSON.stringify(nullJob({ stdout: 'working\ndone', exitCode: 3, durationMs: 200 })));
    const r = await dms('jobs', 'submit', spec, '--follow');
    expect(r.code).toBe(3);
    expect(r.stdout).toBe('working\ndone\n');
    expect(r.stderr).toMatch(new RegExp(`^\\[dms\\] submitted job ${UUID.source} \\(null-job\\)\\n`));
    expect(r.stderr).toMatch(/\[dms\] job \S+ failed \(exit code 3\): exited with code 3\n$/);

    const oom = await dms('jobs', 'submit', specFile(node, 'oom.json', JSON.stringify(nullJob({ oom: true }))), '--follow');
    expect(oom.code).toBe(137);
    const unstartable = await dms('jobs', 'submit', specFile(node, 'bad.json', JSON.stringify(nullJob({ startError: 'no such image' }))), '--follow');
    expect(unstartable.code).toBe(1);
    expect(unstartable.stderr).toMatch(/failed: no such image\n$/);
  });

  it('logs --follow streams a running job to its end; cancel stops one', async () => {
    const job = await rest.submit(nullJob({ stdout: 'a\nb\nc', durationMs: 600 }));
    const followed = await dms('jobs', 'logs', job.id, '--follow');
    expect(followed).toMatchObject({ code: 0, stdout: 'a\nb\nc\n' });

    const long = await rest.submit(nullJob({ durationMs: 60_000 }));
    await rest.waitFor(long.id, ['running']);
    const cancelled = await dms('jobs', 'cancel', long.id);
    expect(cancelled).toMatchObject({ code: 0, stdout: `job ${long.id}: failed (cancelled)\n` });
  });

  it('fails with one line naming the problem', async () => {
    const unknown = await dms('jobs', 'status', '00000000-0000-4000-8000-000000000000');
    expect(unknown).toMatchObject({ code: 1, stdout: '' });
    expect(unknown.stderr).toBe('dms: job 00000000-0000-4000-8000-000000000000 not found (HTTP 404)\n');

    const invalid = await dms('jobs', 'submit', specFile(node, 'invalid.yaml', 'name: x\nresources: {cpu: {cores: 1}, memory: {size: 1}}\n'));
    expect(invalid.code).toBe(1);
    expect(invalid.stderr).toBe('dms: invalid job spec: image is required (HTTP 400)\n');

    const unreadable = await dms('jobs', 'submit', join(node.home, 'missing.yaml'));
    expect(unreadable).toMatchObject({ code: 1, stderr: `dms: cannot read ${join(node.home, 'missing.yaml')}: ENOENT\n` });
    const broken = await dms('jobs', 'submit', specFile(node, 'broken.json', '{"name":'));
    expect(broken.code).toBe(1);
    expect(broken.stderr).toMatch(/^dms: .*broken\.json is not valid JSON: /);
    // YAML's own words for a file of two documents, and a .nan sent as null, said nothing to the writer.
    const two = await dms('jobs', 'submit', specFile(node, 'two.yaml', 'name: a\n---\nname: b\n'));
    expect(two).toMatchObject({ code: 1, stderr: expect.stringMatching(/two\.yaml holds more than one YAML document \(--- between them\): a spec file is one\n$/) });
    const nan = await dms('jobs', 'submit', specFile(node, 'nan.yaml', 'name: x\nimage: none\nresources: {cpu: .nan}\n'));
    expect(nan).toMatchObject({ code: 1, stderr: expect.stringMatching(/nan\.yaml: resources\.cpu is \.nan, \.inf or -\.inf, which no field of a spec takes\n$/) });
    // Found on a running node: read to its end, /dev/zero took the CLI to 606 MB in 5 s.
    const endless = await dms('jobs', 'submit', '/dev/zero');
    expect(endless).toMatchObject({ code: 1, stderr: 'dms: /dev/zero is larger than 16777216 bytes: not a spec, an envelope or a token\n' });
  });
});

describe('dms over pages shorter than asked', () => {
  it('list --all and a prefix look-up read on past a page the 8 MiB bound cut short', { timeout: 60_000 }, async () => {
    // Each just under the body limit (1 MiB): twelve of them do not fit one page. In arguments of
    // 127 KiB: one argument may be at most 128 KiB (Linux's MAX_ARG_STRLEN), so a larger one is refused.
    const big = { ...nullJob({ name: 'paged-big' }), command: ['echo', ...Array.from({ length: 7 }, () => 'x'.repeat(127 * 1024))] };
    const made: string[] = [];
    for (let i = 0; i < 12; i++) made.push((await rest.submit(big)).id);
    const listed = await dms('--json', 'jobs', 'list', '--all', '--oldest-first');
    expect(listed.code, listed.stderr).toBe(0);
    const ids = (JSON.parse(listed.stdout) as { id: string }[]).map((j) => j.id);
    expect(made.every((id) => ids.includes(id))).toBe(true);
    // The newest of them, by a prefix: found past the first page.
    const described = await dms('--json', 'jobs', 'status', made[11].slice(0, 13));
    expect(described.code, described.stderr).toBe(0);
    expect(JSON.parse(described.stdout).id).toBe(made[11]);
  });
});

describe('dms resources and allocations', () => {
  it('shows usage, and creates, lists and releases allocations', async () => {
    const shown = await dms('resources', 'show');
    expect(shown.code).toBe(0);
    expect(shown.stdout).toMatch(/^\s+CPU\s+MEMORY\s+STORAGE\s+GPU\n/);
    // Outside the share, said apart with their bound (jobs.max_images_bytes, 20 GiB by default).
    expect(shown.stdout).toMatch(/^pulled images: \d+(\.\d+)? [KMG]?i?B of 20 GiB \(\d+ images?; jobs\.max_images_bytes, outside the share\)$/m);
    expect(shown.stdout).toMatch(/\ncapacity\s+\d+(\.\d+)? cores\s+/);
    expect(shown.stdout).toMatch(/\nfree\s+/);

    // --storage: the name --disk had before; scripts written then still work.
    const created = await dms('allocations', 'create', '--cpu', '0.5', '--memory', '64MiB', '--storage', '1GiB');
    expect(created.code, created.stderr).toBe(0);
    expect(created.stdout).toMatch(new RegExp(`^allocation (${UUID.source}): 0.5 cores, 64 MiB, 1 GiB, -\\n$`));
    const id = UUID.exec(created.stdout)![0];
    const usage = JSON.parse((await dms('--json', 'resources', 'show')).stdout);
    expect(usage.allocated).toMatchObject({ cpu: { cores: 0.5 }, memory: { size: 64 * MiB }, storage: { size: 1024 * MiB } });

    const listed = await dms('allocations', 'list');
    expect(listed.stdout).toMatch(new RegExp(`${id.slice(0, 8)}\\s+0.5 cores\\s+64 MiB\\s+1 GiB`));
    const released = await dms('allocations', 'release', id);
    expect(released.stdout).toMatch(new RegExp(`^allocation ${id} released at \\S+\\n$`));
    expect((await dms('allocations', 'list')).stdout).toBe('no allocations\n');
    expect((await dms('allocations', 'list', '--all')).stdout).toContain(id.slice(0, 8));
    expect((await dms('allocations', 'list', '--all', '--wide')).stdout).toContain(id);
  });

  it('says which resource is short when an allocation does not fit, and refuses sizes it cannot read', async () => {
    const tooMuch = await dms('allocations', 'create', '--cpu', '100000', '--memory', '16MiB');
    expect(tooMuch.code).toBe(1);
    expect(tooMuch.stderr).toMatch(/^dms: not enough cpu: 100000 cores asked, .* \(HTTP 409\)\n$/);
    const badSize = await dms('allocations', 'create', '--cpu', '1', '--memory', 'lots');
    expect(badSize).toMatchObject({ code: 1, stderr: "dms: --memory: 'lots' is not a size (e.g. 512MiB, 2GiB, 10GB)\n" });
  });
});
