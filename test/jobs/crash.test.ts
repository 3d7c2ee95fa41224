// kill -9 of a node in the middle of a burst of submissions: every job the node answered
// 201 for is still there after a restart, and every one of them reaches an end.
import { afterAll, expect, it } from 'vitest';
import type { Job } from '../../behaviors/jobs/schema.js';
import { type NodeProcess, removeHome } from '../helpers/node.js';
import { nullJob, Rest, startJobNode, until } from './helpers.js';

const SUBMISSIONS = 500;
const CONCURRENCY = 32;
/** Kill once this many were acknowledged: well inside the burst. */
const KILL_AFTER = 150;

const nodes: NodeProcess[] = [];
afterAll(async () => {
  for (const n of nodes) await n.stop();
  if (nodes[0]) removeHome(nodes[0].home);
});

it('loses no acknowledged job when the node is killed during 500 concurrent submissions, and settles them all after a restart', async () => {
  const first = await startJobNode();
  nodes.push(first);
  // Long enough that some are still running when the node dies, and are found gone after.
  const spec = nullJob({ durationMs: 300, stdout: 'out' });
  const acknowledged = new Set<string>();
  const refused: number[] = [];
  let sent = 0;
  let killed: Promise<void> | undefined;

  await Promise.all(
    Array.from({ length: CONCURRENCY }, async () => {
      while (sent < SUBMISSIONS && !killed) {
        sent++;
        let res: Response;
        try {
          res = await fetch(`${first.url}/api/v1/jobs`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(spec) });
        } catch {
          return; // the node is gone: this request was never acknowledged
        }
        const text = await res.text().catch(() => '');
        if (res.status !== 201) {
          refused.push(res.status);
          continue;
        }
        acknowledged.add((JSON.parse(text) as Job).id);
        if (acknowledged.size >= KILL_AFTER) killed ??= first.kill();
      }
    }),
  );
  await killed;
  expect(refused).toEqual([]);
  expect(acknowledged.size).toBeGreaterThanOrEqual(KILL_AFTER);

  const second = await startJobNode({ home: first.home });
  nodes.push(second);
  const rest = new Rest(second.url);
  // Every acknowledged job exists, and every job of the node reaches an end: the ones that
  // never started run now, the ones whose runs died with the node fail saying so.
  const ended = await until('every job to end', async () => {
    const open = (await rest.jobs('/api/v1/jobs?status=pending,running&limit=1000')).jobs;
    if (open.length > 0) return undefined;
    const all: Job[] = [];
    for (let offset = 0; ; offset += 1000) {
      const page = (await rest.jobs(`/api/v1/jobs?limit=1000&offset=${offset}&order=asc`)).jobs;
      all.push(...page);
      if (page.length < 1000) return all;
    }
  }, 60_000);
  const stored = new Map(ended.map((j) => [j.id, j]));
  const lost = [...acknowledged].filter((id) => !stored.has(id));
  expect(lost).toEqual([]);
  for (const job of ended) {
    if (job.status === 'failed') expect(job.error).toBe('the null executor keeps no run across a restart');
    else expect(job).toMatchObject({ status: 'completed', exit_code: 0 });
  }
  // The node was killed mid-burst: it cannot have stored more than was sent.
  expect(ended.length).toBeLessThanOrEqual(sent);
}, 120_000);
