/**
 * `dms ensemble` against a real node process (null executor): deploy from YAML and wait, list,
 * status, describe and a part's logs by an id prefix or a name, cancel, and the refusals a mistaken spec gets, each a
 * one-line reason and a non-zero exit.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type NodeProcess, runCli, startNode } from '../helpers/node.js';

let node: NodeProcess;
const dir = mkdtempSync(join(tmpdir(), 'dms-ensemble-cli-'));
const dms = (...args: string[]) => runCli(['--home', node.home, ...args]);
const spec = (name: string, text: string) => {
  const file = join(dir, name);
  writeFileSync(file, text);
  return file;
};

beforeAll(async () => {
  node = await startNode();
}, 60_000);
afterAll(async () => {
  await node?.stop();
  rmSync(dir, { recursive: true, force: true });
});

describe('dms ensemble', { timeout: 60_000 }, () => {
  it('deploys a YAML spec and waits: exits 0 once every task completed, the service stopped', async () => {
    const file = spec('pair.yaml', `name: pair
parts:
  server: {image: none, executor: null, kind: service, ports: [8080], resources: {cpu: 0.1, memory: 16MiB}, environment: {DMS_NULL_DURATION_MS: "60000"}}
  client: {image: none, executor: null, resources: {cpu: 0.1, memory: 16MiB}, environment: {DMS_NULL_DURATION_MS: "300", DMS_NULL_STDOUT: fetched}}
`);
    const r = await dms('ensemble', 'deploy', file, '--wait');
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(/^ensemble [0-9a-f-]{36} \(pair\): completed \(every task completed\)\n/);
    expect(r.stdout).toMatch(/client\s+task\s+completed/);
    expect(r.stdout).toMatch(/server\s+service\s+failed\s.*cancelled: its ensemble completed/);
    // A part's output, by the ensemble's name and the part's.
    const logs = await dms('ensemble', 'logs', 'pair', 'client');
    expect(logs.stderr).toBe('');
    expect(logs.stdout).toBe('fetched\n');
    const followed = await dms('ensemble', 'logs', 'pair', 'client', '--follow');
    expect(followed.code).toBe(0);
    expect(followed.stdout).toBe('fetched\n');
    const nopart = await dms('ensemble', 'logs', 'pair', 'db');
    expect(nopart.code).toBe(1);
    expect(nopart.stderr).toMatch(/^dms: ensemble [0-9a-f]{8} has no part 'db' \(parts: (server, client|client, server)\)\n$/);
  });

  it('lists, reads by a prefix and cancels', async () => {
    const file = spec('waits.yaml', `name: waits
parts:
  lonely: {image: none, executor: null, placement: {labels: {nowhere: "x"}}}
`);
    const made = await dms('--json', 'ensemble', 'deploy', file);
    expect(made.code).toBe(0);
    const id = (JSON.parse(made.stdout) as { id: string }).id;
    const list = await dms('ensemble', 'list');
    expect(list.stdout).toMatch(new RegExp(`^ID\\s+STATUS\\s+PARTS\\s+RUNNING\\s+CREATED\\s+NAME\\n(.*\\n)*${id.slice(0, 8)}\\s+pending\\s+1\\s+0\\s`));
    // Two ensembles are stored by now (pair, waits): a page of one says that one more is left.
    const first = await dms('ensemble', 'list', '--limit', '1');
    expect(first.stdout.split('\n').filter(Boolean)).toHaveLength(2);
    expect(first.stderr).toMatch(/^1 more; use --limit\/--offset \(or --all\)\n$/);
    const all = await dms('--json', 'ensemble', 'list', '--all');
    expect((JSON.parse(all.stdout) as { id: string }[]).map((e) => e.id)).toContain(id);
    const status = await dms('ensemble', 'status', id.slice(0, 6));
    expect(status.stdout).toMatch(new RegExp(`^ensemble ${id} \\(waits\\): pending \\(`));
    const cancelled = await dms('ensemble', 'cancel', id.slice(0, 6));
    expect(cancelled.code).toBe(0);
    expect(cancelled.stdout).toBe(`ensemble ${id}: failed (cancelled)\n`);
    const again = await dms('ensemble', 'cancel', id);
    expect(again.code).toBe(1);
    expect(again.stderr).toMatch(/^dms: ensemble .* has already failed/);
  });

  it('reads and cancels by name while one ensemble has it; a name two share is refused, naming both', async () => {
    const file = spec('named.yaml', `name: named-once
parts:
  lonely: {image: none, executor: null, placement: {labels: {nowhere: "x"}}}
`);
    const first = JSON.parse((await dms('--json', 'ensemble', 'deploy', file)).stdout) as { id: string };
    const status = await dms('ensemble', 'status', 'named-once');
    expect(status.stderr).toBe('');
    expect(status.stdout).toMatch(new RegExp(`^ensemble ${first.id} \\(named-once\\): pending`));
    const second = JSON.parse((await dms('--json', 'ensemble', 'deploy', file)).stdout) as { id: string };
    const both = await dms('ensemble', 'cancel', 'named-once');
    expect(both.code).toBe(1);
    expect(both.stderr).toContain(`2 ensembles are named 'named-once': `);
    expect(both.stderr).toContain(`${first.id.slice(0, 8)} (pending)`);
    expect(both.stderr).toContain(`${second.id.slice(0, 8)} (pending)`);
    for (const { id } of [first, second]) expect((await dms('ensemble', 'cancel', id)).code).toBe(0);
    const none = await dms('ensemble', 'status', 'no-such-name');
    expect(none.code).toBe(1);
    expect(none.stderr).toBe("dms: no ensemble id starts with 'no-such-name', and none is named 'no-such-name'\n");
  });

  it('refuses a mistaken spec with one line naming what is wrong', async () => {
    const bad = spec('bad.yaml', `name: bad
parts:
  Web: {image: none, executor: null}
`);
    const r = await dms('ensemble', 'deploy', bad);
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/^dms: invalid ensemble spec: parts: key 'Web': part names are DNS labels.*\n$/);
    const cycle = spec('cycle.yaml', `name: cycle
parts:
  a: {image: none, executor: null, near: {part: b, max_rtt_ms: 5}}
  b: {image: none, executor: null, near: {part: a, max_rtt_ms: 5}}
`);
    expect((await dms('ensemble', 'deploy', cycle)).stderr).toMatch(/near constraints form a cycle \(a -> b -> a\)/);
    const forward = await dms('ensemble', 'port-forward', 'abc', 'server');
    expect(forward.code).toBe(1);
    expect(forward.stderr).toMatch(/^dms: 'server' is not <part>:<port> \(e\.g\. server:8080\)/);
  });
});
