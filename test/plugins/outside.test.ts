// A plugin written where `dms` is not installed (a folder of its own, no node_modules, no npm
// link) still loads: `import 'dms/plugin'` resolves to the node that loads it, the same module
// the node checks plugins with, whatever copy of dms the plugin's folder might hold.
import { copyFileSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DmsClient } from '../../client/client.js';
import { type NodeProcess, removeHome, startNode } from '../helpers/node.js';

const greeter = fileURLToPath(new URL('../../examples/plugins/greeter/index.mjs', import.meta.url));

let dir: string;
let node: NodeProcess;

beforeAll(async () => {
  // Under the system's temp dir: no parent folder has a node_modules with dms in it.
  dir = mkdtempSync(join(tmpdir(), 'dms-plugin-outside-'));
  mkdirSync(join(dir, 'greeter'));
  copyFileSync(greeter, join(dir, 'greeter', 'index.mjs'));
  // A package of its own, as an author would start one, with dms nowhere among its dependencies.
  writeFileSync(join(dir, 'greeter', 'package.json'), JSON.stringify({ name: 'my-greeter', type: 'module', private: true }));
  node = await startNode({ timeoutMs: 45_000, config: { plugins: { modules: [join(dir, 'greeter', 'index.mjs')] } } });
}, 60_000);
afterAll(async () => {
  await node?.stop();
  if (node) removeHome(node.home);
  rmSync(dir, { recursive: true, force: true });
});

describe('a plugin outside the checkout', () => {
  it('loads without dms installed beside it, and its behavior answers', async () => {
    const client = new DmsClient({ url: node.url, timeoutMs: 20_000 });
    const reply = await client.invoke<{ greeting: string }>({ inbox: 'greeter' }, '/plugin/greeter/hello', { name: 'Ada' }, { raw: true });
    expect(reply.error).toBeUndefined();
    expect(reply.payload.greeting).toBe('Hello, Ada!');
  });
});
