// A home as release 0.1.0 (commit 41df42f, node-sqlite3 through @mikro-orm/sqlite, the tsc
// build) left it after running three null jobs and stopping: its keys, capability anchors and
// database. This build (bundled, migrator loaded only when a database needs it) must start on it
// as the same node and keep every job and event, and go on running jobs.
import { chmodSync, cpSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterEach, expect, it } from 'vitest';
import { readKey } from '../../runtime/home.js';
import { waitFor } from '../helpers/network.js';
import { type NodeProcess, removeHome, startNode, tempHome } from '../helpers/node.js';

const FIXTURE = fileURLToPath(new URL('./fixtures/home-0.1.0-41df42f/', import.meta.url));
const JOB_IDS = ['51f56887-4a09-4eac-b408-8942b50cb3f9', 'f82b9262-c979-49cd-809d-b4f7c933c176', '497a408b-a3b8-4b17-ae81-fd0d8107aae7'];

let node: NodeProcess | undefined;
let home: string | undefined;
afterEach(async () => {
  await node?.stop();
  if (home) removeHome(home);
});

it('starts as the same node on a home written by release 0.1.0 and keeps its jobs and their events', async () => {
  home = tempHome();
  cpSync(FIXTURE, home, { recursive: true });
  // git keeps no modes; the node refuses keys and a database others can read.
  for (const f of ['dms.sqlite', 'anchors.json', ...readdirSync(join(home, 'keys')).map((k) => `keys/${k}`)]) chmodSync(join(home, f), 0o600);
  const did = readKey(join(home, 'keys', 'node.json')).did;

  node = await startNode({ home, config: { network: { enabled: false } }, timeoutMs: 30_000 });
  expect(node.did).toBe(did);
  const api = (path: string) => fetch(`${node!.url}/api/v1${path}`).then(async (r) => ({ status: r.status, body: await r.json() }));

  const list = await api('/jobs?order=asc');
  expect(list.status).toBe(200);
  expect(list.body.map((j: { id: string; name: string; status: string }) => [j.id, j.name, j.status])).toEqual([
    [JOB_IDS[0], 'first', 'completed'],
    [JOB_IDS[1], 'second', 'completed'],
    [JOB_IDS[2], 'third', 'completed'],
  ]);
  const events = await api(`/jobs/${JOB_IDS[0]}/events`);
  expect(events.status).toBe(200);
  expect(events.body.events.map((e: { to: string }) => e.to)).toEqual(['pending', 'running', 'completed']);

  const res = await fetch(`${node.url}/api/v1/jobs`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ name: 'after-upgrade', image: 'none', executor: 'null', resources: { cpu: 0.01, memory: '1MiB' } }),
  });
  expect(res.status).toBe(201);
  const { id } = (await res.json()) as { id: string };
  await waitFor('the job submitted after the upgrade to complete', async () => (await api(`/jobs/${id}`)).body.status === 'completed', { timeoutMs: 15_000 });
}, 60_000);
