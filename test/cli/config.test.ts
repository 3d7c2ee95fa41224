import { readFileSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { assertBuilt, cleanupHomes, dms, tempHome } from './helpers.js';

beforeAll(assertBuilt);
afterAll(cleanupHomes);

const fileOf = (home: string) => JSON.parse(readFileSync(join(home, 'dms_config.json'), 'utf8'));

function expectFailure(r: { code: number; stdout: string; stderr: string }, ...parts: string[]): void {
  expect(r.code).not.toBe(0);
  expect(r.stdout).toBe('');
  const line = r.stderr.trim();
  expect(line.split('\n')).toHaveLength(1);
  expect(line).toMatch(/^dms: /);
  for (const p of parts) expect(line).toContain(p);
}

// Each case is a chain of CLI processes; on a loaded machine that takes longer than unit tests.
describe.concurrent('dms config', { timeout: 90_000 }, () => {
  it('set writes the coerced value, keeps other keys, and get reads it back', async () => {
    const home = tempHome('cfg-set');
    writeFileSync(join(home, 'dms_config.json'), JSON.stringify({ general: { name: 'box' }, rest: { addr: '127.0.0.1' } }));
    const set = await dms(home, ['config', 'set', 'rest.port', '8123']);
    expect(set.code, set.stderr).toBe(0);
    expect(set.stdout).toContain('rest.port = 8123');
    expect(set.stdout).toContain('takes effect on the next `dms start`');
    expect(fileOf(home)).toEqual({ general: { name: 'box' }, rest: { addr: '127.0.0.1', port: 8123 } });

    expect((await dms(home, ['config', 'set', 'network.EnableMDNS', 'true'])).code).toBe(0);
    expect((await dms(home, ['config', 'set', 'network.BootstrapPeers', '/ip4/10.0.0.1/tcp/9000/p2p/a, /ip4/10.0.0.2/tcp/9000/p2p/b'])).code).toBe(0);
    expect(fileOf(home).network).toEqual({ EnableMDNS: true, BootstrapPeers: ['/ip4/10.0.0.1/tcp/9000/p2p/a', '/ip4/10.0.0.2/tcp/9000/p2p/b'] });

    const get = await dms(home, ['config', 'get', 'rest.port']);
    expect(get.code, get.stderr).toBe(0);
    expect(get.stdout).toBe('8123\n');
    expect(JSON.parse((await dms(home, ['--json', 'config', 'get', 'network.EnableMDNS'])).stdout)).toEqual({ key: 'network.EnableMDNS', value: true, source: join(home, 'dms_config.json') });
    // A string prints bare.
    expect((await dms(home, ['config', 'get', 'general.name'])).stdout).toBe('box\n');
  });

  it('get shows the effective value: the environment overrides the file', async () => {
    const home = tempHome('cfg-env');
    expect((await dms(home, ['config', 'set', 'rest.port', '8123'])).code).toBe(0);
    expect((await dms(home, ['config', 'get', 'rest.port'], { env: { DMS_PORT: '7001' } })).stdout).toBe('7001\n');
    const set = await dms(home, ['--json', 'config', 'set', 'rest.port', '8124'], { env: { DMS_PORT: '7001' } });
    expect(JSON.parse(set.stdout)).toMatchObject({ key: 'rest.port', value: 8124, overridden_by: 'DMS_PORT', restart_required: true });
  });

  it('list prints the whole effective config with secrets redacted', async () => {
    const home = tempHome('cfg-list');
    const secret = 'hunter2-very-secret';
    const set = await dms(home, ['config', 'set', 'auth.jwt_secret', secret]);
    expect(set.code, set.stderr).toBe(0);
    expect(set.stdout).not.toContain(secret);
    expect(statSync(join(home, 'dms_config.json')).mode & 0o777).toBe(0o600);

    const list = await dms(home, ['config', 'list']);
    expect(list.code, list.stderr).toBe(0);
    expect(list.stdout).toContain('rest.port = 9999');
    expect(list.stdout).toContain('auth.jwt_secret = "[redacted]"');
    expect(list.stdout).not.toContain(secret);

    const json = await dms(home, ['--json', 'config', 'list']);
    const out = JSON.parse(json.stdout);
    expect(out.file).toBe(join(home, 'dms_config.json'));
    expect(out.config.rest.port).toBe(9999);
    expect(out.config.auth.jwt_secret).toBe('[redacted]');
    expect((await dms(home, ['config', 'get', 'auth.jwt_secret'])).stdout).toBe('[redacted]\n');
  });

  it('refuses an unknown key, naming it and the keys nearby', async () => {
    const home = tempHome('cfg-badkey');
    expectFailure(await dms(home, ['config', 'set', 'rest.prot', '1']), "unknown configuration key 'rest.prot'", 'port');
    expectFailure(await dms(home, ['config', 'get', 'nope']), "unknown configuration key 'nope'", 'rest');
    expectFailure(await dms(home, ['config', 'set', 'rest', '1']), "'rest' is a section", 'rest.port');
  });

  it('refuses an invalid value, naming the key and the problem, and leaves the file alone', async () => {
    const home = tempHome('cfg-badvalue');
    expect((await dms(home, ['config', 'set', 'rest.port', '8123'])).code).toBe(0);
    const before = readFileSync(join(home, 'dms_config.json'), 'utf8');
    expectFailure(await dms(home, ['config', 'set', 'rest.port', 'abc']), 'rest.port', 'not a number');
    expectFailure(await dms(home, ['config', 'set', 'rest.port', '70000']), 'rest.port', '65535');
    expectFailure(await dms(home, ['config', 'set', 'general.log_level', 'loud']), 'general.log_level');
    expect(readFileSync(join(home, 'dms_config.json'), 'utf8')).toBe(before);
  });

  it("never copies the working directory's config into the home: the home's file holds what was set there", async () => {
    const home = tempHome('cfg-cwd');
    const cwd = tempHome('cfg-cwd-dir');
    writeFileSync(join(cwd, 'dms_config.json'), JSON.stringify({ general: { name: 'from-cwd' } }));
    const set = await dms(home, ['config', 'set', 'rest.port', '8200'], { cwd });
    expect(set.code, set.stderr).toBe(0);
    expect(fileOf(home)).toEqual({ rest: { port: 8200 } });
    expect(set.stdout).toContain(`${join(cwd, 'dms_config.json')}, which this home read until now, is no longer read for it`);
  });

  it('writes to the file named by --config', async () => {
    const home = tempHome('cfg-flag');
    const file = join(tempHome('cfg-flag-dir'), 'custom.json');
    expect((await dms(home, ['--config', file, 'config', 'set', 'rest.allow_unsigned', 'null'])).code).toBe(0);
    expect(JSON.parse(readFileSync(file, 'utf8'))).toEqual({ rest: { allow_unsigned: null } });
    expect((await dms(home, ['--config', file, 'config', 'get', 'rest.allow_unsigned'])).stdout).toBe('null\n');
  });
});
