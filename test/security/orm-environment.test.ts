// The node's database is configured by DMS alone (its config file, DMS_* variables, flags), not by
// what MikroORM would read for another program: a `.env`, a package.json or MIKRO_ORM_* variables
// where the node happens to be started. Before, a node started in such a directory stored its
// jobs (their secrets included) in a file the `.env` named, readable by all, logged every SQL
// statement, ran a "driver" module from that directory's node_modules, or refused to start.
import { existsSync, mkdirSync, mkdtempSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, expect, it } from 'vitest';
import { type NodeProcess, removeHome, startNode } from '../helpers/node.js';

const cwd = mkdtempSync(join(tmpdir(), 'dms-orm-env-'));
let node: NodeProcess | undefined;

afterAll(async () => {
  await node?.stop();
  if (node) removeHome(node.home);
  rmSync(cwd, { recursive: true, force: true });
});

/** A package of `cwd`'s node_modules: its package.json, and an index.js leaving a mark when anything runs it. */
function fakePackage(name: string, version: string): string {
  const dir = join(cwd, 'node_modules', name);
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, 'package.json'), JSON.stringify({ name, version, main: 'index.js' }));
  const mark = join(cwd, `${name.replace('/', '+')}.ran`);
  writeFileSync(join(dir, 'index.js'), `require('node:fs').writeFileSync(${JSON.stringify(mark)}, 'ran');`);
  return mark;
}

it('starts where a .env, a package.json and MIKRO_ORM_* variables speak to MikroORM, and none of them changes its database', { timeout: 60_000 }, async () => {
  const elsewhere = join(cwd, 'elsewhere.sqlite');
  writeFileSync(join(cwd, '.env'), `MIKRO_ORM_DB_NAME=${elsewhere}\nMIKRO_ORM_TYPE=postgresql\nMIKRO_ORM_DEBUG=true\n`);
  writeFileSync(join(cwd, 'package.json'), JSON.stringify({ name: 'someone-elses-project', dependencies: { '@mikro-orm/sqlite': '5.0.0', '@mikro-orm/postgresql': '5.0.0' } }));
  const ran = [fakePackage('@mikro-orm/sqlite', '5.0.0'), fakePackage('@mikro-orm/postgresql', '5.0.0')];

  node = await startNode({ cwd, env: { MIKRO_ORM_DEBUG: 'true', MIKRO_ORM_DB_NAME: elsewhere } });
  const res = await fetch(`${node.url}/api/v1/jobs`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ name: 'kept-here', image: 'none', executor: 'null', secrets: { TOKEN: 's3cr3t-value' } }),
  });
  expect(res.status).toBe(201);

  // Stored where the home says, owner-only; nothing made where the .env pointed.
  const db = join(node.home, 'dms.sqlite');
  expect(existsSync(db)).toBe(true);
  expect(statSync(db).mode & 0o077).toBe(0);
  expect(existsSync(elsewhere)).toBe(false);
  // No module of that directory ran, and no statement (with its parameters) was logged.
  for (const mark of ran) expect(existsSync(mark)).toBe(false);
  expect(node.logs()).not.toMatch(/\[query\]|s3cr3t-value/);
});
