import { readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { readKey } from '../../runtime/home.js';
import { type NodeProcess, removeHome, runCli, startNode, tempHome } from '../helpers/node.js';

/** `dms init` / `dms start` with keys at rest: sealed with DMS_PASSPHRASE, plain 0600 without, and never a wait. */

const homes: string[] = [];
const nodes: NodeProcess[] = [];
afterAll(async () => {
  for (const n of nodes) await n.stop();
  homes.forEach(removeHome);
});
const home = () => {
  const h = tempHome();
  homes.push(h);
  return h;
};
const PASS = 'a passphrase for the test keys';

describe('dms init and start with keys at rest', () => {
  it('without a passphrase or a terminal, stores the keys 0600 and says so', async () => {
    const h = home();
    const r = await runCli(['--home', h, 'init']);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toMatch(/keys are stored unencrypted, readable only by their owner \(mode 0600\)/);
    for (const f of ['node.json', 'operator.json']) {
      expect(statSync(join(h, 'keys', f)).mode & 0o777).toBe(0o600);
      expect(JSON.parse(readFileSync(join(h, 'keys', f), 'utf8')).seed).toMatch(/^[0-9a-f]{64}$/);
    }
    expect(JSON.parse(readFileSync(join(h, 'anchors.json'), 'utf8')).root).toEqual([readKey(join(h, 'keys', 'operator.json')).did]);
  });

  it('with DMS_PASSPHRASE, seals them; start without it fails at once naming it, and starts with it', { timeout: 90_000 }, async () => {
    const h = home();
    const r = await runCli(['--home', h, '--json', 'init'], { DMS_PASSPHRASE: PASS });
    expect(r.code, r.stderr).toBe(0);
    expect(JSON.parse(r.stdout).encrypted).toEqual({ node: true, operator: true });
    const file = readFileSync(join(h, 'keys', 'operator.json'), 'utf8');
    expect(JSON.parse(file).seed).toBeUndefined();
    expect(file).not.toContain(PASS);

    const t0 = Date.now();
    const refused = await runCli(['--home', h, 'start', '--port', '0']);
    expect(refused.code).not.toBe(0);
    expect(refused.stderr.trim()).toMatch(/^dms: .*keys\/node\.json is encrypted: set DMS_PASSPHRASE/);
    // At once: before starting anything, let alone waiting for a passphrase; the margin is for
    // a loaded machine, where starting Node and loading the CLI alone can take seconds.
    expect(Date.now() - t0).toBeLessThan(20_000);
    const wrong = await runCli(['--home', h, 'start', '--port', '0'], { DMS_PASSPHRASE: 'not it' });
    expect(wrong.stderr).toMatch(/wrong passphrase/);
    expect(wrong.stderr).not.toContain('not it');

    const node = await startNode({ home: h, env: { DMS_PASSPHRASE: PASS }, config: { network: { enabled: false } } });
    nodes.push(node);
    const did = await runCli(['--home', h, 'key', 'did']);
    expect(did.stdout.trim()).toBe(readKey(join(h, 'keys', 'operator.json'), PASS).did);
    // Commands that sign need the passphrase too, and say so instead of waiting.
    const noPass = await runCli(['--home', h, 'actor', 'invoke', '/public/hello']);
    expect(noPass.stderr.trim()).toMatch(/operator\.json is encrypted: set DMS_PASSPHRASE/);
    const ok = await runCli(['--home', h, 'actor', 'invoke', '/public/hello'], { DMS_PASSPHRASE: PASS });
    expect(ok.code, ok.stderr).toBe(0);
  });
});
