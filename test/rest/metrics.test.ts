// GET /metrics on a real node: what it counts after real traffic and a real job, that a sender
// inventing behavior names cannot add series, and that Prometheus' own linter accepts it
// (`promtool check metrics`, from Debian's prometheus package, which .ci/run installs).
import { spawnSync } from 'node:child_process';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DmsClient } from '../../client/index.js';
import { type NodeProcess, removeHome } from '../helpers/node.js';
import { newCaller, wire } from '../helpers/envelopes.js';
import { parseEnvelope } from '../../runtime/wire/envelope.js';
import { pipelined } from '../helpers/raw-http.js';
import { gate } from '../helpers/required.js';
import { nullJob, Rest, startJobNode } from '../jobs/helpers.js';

const promtool = gate('the promtool lint of /metrics', spawnSync('promtool', ['--version']).status === 0 ? null : 'promtool is not installed (Debian package prometheus)', 'DMS_REQUIRE_PROMTOOL');

let node: NodeProcess;
beforeAll(async () => {
  node = await startJobNode();
}, 60_000);
afterAll(async () => {
  await node?.stop();
  if (node) removeHome(node.home);
});

const scrape = async () => {
  const res = await fetch(`${node.url}/metrics`);
  expect(res.status).toBe(200);
  expect(res.headers.get('content-type')).toMatch(/^text\/plain; version=0\.0\.4/);
  return res.text();
};
/** The value of one series, by its name and labels as written. */
const value = (text: string, series: string): number | undefined => {
  const line = text.split('\n').find((l) => l.startsWith(`${series} `));
  return line === undefined ? undefined : Number(line.slice(series.length + 1));
};

describe('GET /metrics', () => {
  it('counts envelopes by behavior and outcome, times invokes, and reports mailboxes, peers, jobs, runs and placements', async () => {
    const client = new DmsClient({ url: node.url, timeoutMs: 20_000 });
    for (let i = 0; i < 3; i++) await client.invoke({ inbox: 'root' }, '/public/hello', {});
    const rest = new Rest(node.url);
    const job = await rest.submit(nullJob({ stdout: 'hi\n' }));
    await rest.waitFor(job.id);

    const text = await scrape();
    expect(value(text, 'dms_envelopes_total{behavior="/public/hello",outcome="ok"}')).toBeGreaterThanOrEqual(3);
    expect(value(text, 'dms_envelopes_total{behavior="/dms/job/submit",outcome="ok"}')).toBeGreaterThanOrEqual(1);
    expect(value(text, 'dms_invoke_duration_seconds_count{kind="local"}')).toBeGreaterThanOrEqual(4);
    expect(value(text, 'dms_mailbox_depth{actor="root"}')).toBe(0);
    expect(value(text, 'dms_peers')).toBe(0);
    expect(value(text, 'dms_jobs{status="completed"}')).toBe(1);
    expect(value(text, 'dms_executor_run_duration_seconds_count{executor="null",outcome="completed"}')).toBe(1);
    expect(value(text, 'dms_placements_total{outcome="placed"}')).toBe(1);
    expect(value(text, 'dms_process_resident_memory_bytes')).toBeGreaterThan(0);
    // Where the block store read its files (runtime/blocks/block-reads.ts): both series, from the start.
    expect(value(text, 'dms_block_reads{via="event_loop"}')).toBeGreaterThanOrEqual(0);
    expect(value(text, 'dms_block_reads{via="pool"}')).toBeGreaterThanOrEqual(0);
  });

  it('checks the signatures of a burst off its event loop, on the verify thread, with the verdicts of a check inline, and counts where', async () => {
    // 1,200 signed invokes from 30 clients over 30 connections, 8 pipelined on each (so they reach
    // the node many at a time, as many as a connection has handled at once, within its 256 pending
    // per client), every third with its behavior changed after signing.
    const callers = Array.from({ length: 30 }, () => newCaller());
    const root = { id: '', did: '', addr: { host: node.peerId, inbox: 'root' } };
    const bodies = Array.from({ length: 1200 }, (_, i) => {
      // Long-lived: on a loaded machine the burst's admission took longer than the default 5 s,
      // and what this test counts is where the checks ran, not how a late invoke is answered
      // (test/rest/expiry-during-admission.test.ts).
      const text = wire(callers[i % 30]!, { to: root, be: '/public/hello', cont: `/private/burst/${i}`, ttlMs: 25_000 });
      return i % 3 === 2 ? text.replace('"be":"/public/hello"', '"be":"/public/status"') : text;
    });
    const before = await scrape();
    const answers = (await Promise.all(Array.from({ length: 30 }, (_, c) => pipelined(node.url, '/api/v1/actor/invoke', bodies.filter((_, i) => i % 30 === c), 8)))).flatMap((list, c) =>
      list.map((a, k) => ({ ...a, i: k * 30 + c })),
    );
    expect(answers).toHaveLength(1200);
    for (const { i, status, body } of answers) {
      if (i % 3 === 2) expect([status, JSON.parse(body).error], `invoke ${i}`).toEqual([400, 'sig: signature does not verify']);
      else expect([status, parseEnvelope(body).be], `invoke ${i}`).toEqual([200, `/private/burst/${i}`]);
    }
    const after = await scrape();
    const checks = (text: string, on: string) => value(text, `dms_envelope_signature_checks{on="${on}"}`) ?? 0;
    const loop = checks(after, 'loop') - checks(before, 'loop');
    const onThread = checks(after, 'thread') - checks(before, 'thread');
    expect(loop + onThread).toBe(1200);
    // The loop was busy and the checks came many to a turn: once the thread had started, they went to it.
    expect(onThread, `${loop} checked on the loop, ${onThread} on the thread`).toBeGreaterThan(400);
  });

  it('counts envelopes for behaviors it does not have under one label, however many names a sender invents', async () => {
    const client = new DmsClient({ url: node.url, timeoutMs: 20_000 });
    for (let i = 0; i < 20; i++) await client.invoke({ inbox: 'root' }, `/invented/${i}`, {}).catch(() => undefined);
    const text = await scrape();
    expect(text).not.toContain('/invented/');
    expect(value(text, 'dms_envelopes_total{behavior="(unknown)",outcome="rejected"}')).toBeGreaterThanOrEqual(20);
  });

  it.runIf(promtool)('passes promtool check metrics', async () => {
    const text = await scrape();
    const lint = spawnSync('promtool', ['check', 'metrics'], { input: text, encoding: 'utf8' });
    expect(lint.error, 'promtool is not installed (Debian package prometheus)').toBeUndefined();
    expect(`${lint.stdout}${lint.stderr}`).toBe('');
    expect(lint.status).toBe(0);
  });
});
