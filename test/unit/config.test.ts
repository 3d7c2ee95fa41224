import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { allowsUnsigned, defaultConfig, ENV_KEYS, redact } from '../../runtime/config.js';
import { loadConfig } from '../../runtime/config-file.js';

const home = () => mkdtempSync(join(tmpdir(), 'dms-cfg-'));

describe('config', () => {
  it('dms_config.json at the repository root holds exactly the defaults', () => {
    const file = JSON.parse(readFileSync(new URL('../../dms_config.json', import.meta.url), 'utf8'));
    expect(file).toEqual(defaultConfig());
  });

  it('layers defaults < file < environment < flags', () => {
    const h = home();
    writeFileSync(join(h, 'dms_config.json'), JSON.stringify({ rest: { port: 1000, addr: '127.0.0.2' }, general: { log_level: 'debug' } }));
    const c = loadConfig({ home: h, env: { DMS_PORT: '2000' }, flags: { 'rest.port': 3000 } });
    expect(c.rest.port).toBe(3000);
    expect(c.rest.addr).toBe('127.0.0.2');
    expect(c.general.log_level).toBe('debug');
    expect(c.rest.body_limit).toBe(1_048_576);
    expect(loadConfig({ home: h, env: { DMS_PORT: '2000' } }).rest.port).toBe(2000);
  });

  it('reads every seed environment variable', () => {
    const env = {
      DMS_HOST: '10.0.0.1',
      DMS_PORT: '1234',
      DMS_TLS_ENABLED: 'true',
      DMS_TLS_CERT_FILE: '/c.pem',
      DMS_TLS_KEY_FILE: '/k.pem',
      DMS_DB_TYPE: 'sqlite',
      DMS_DB_PATH: '/tmp/x.sqlite',
      DMS_NETWORK_LISTEN_ADDRESSES: '/ip4/127.0.0.1/tcp/1, /ip4/127.0.0.1/tcp/2',
      DMS_NETWORK_BOOTSTRAP_PEERS: '/ip4/127.0.0.1/tcp/3/p2p/12D3KooWK99VoVxNE7XzyBwXEzW7xhK7Gpv85r9F3V3fyKSUKPH5',
      DMS_JWT_SECRET: 's3cret',
      DMS_API_KEY_ENABLED: '1',
      DMS_DEBUG: 'true',
      DMS_STAGE_TIMINGS: '1',
    };
    expect(Object.keys(env).sort()).toEqual(Object.keys(ENV_KEYS).sort());
    const c = loadConfig({ home: home(), env });
    expect(c.rest).toMatchObject({ addr: '10.0.0.1', port: 1234 });
    expect(c.tls).toEqual({ enabled: true, cert_file: '/c.pem', key_file: '/k.pem' });
    expect(c.db).toEqual({ type: 'sqlite', path: '/tmp/x.sqlite' });
    expect(c.network.ListenAddresses).toEqual(['/ip4/127.0.0.1/tcp/1', '/ip4/127.0.0.1/tcp/2']);
    expect(c.network.BootstrapPeers).toHaveLength(1);
    expect(c.auth).toEqual({ jwt_secret: 's3cret', api_key_enabled: true, jwt_max_lifetime_s: 86_400, jwt_issuer: '', jwt_audience: '' });
    expect(c.general.debug).toBe(true);
    expect(c.general.stage_timings).toBe(true);
    expect(redact(c).auth.jwt_secret).toBe('[redacted]');
    expect(allowsUnsigned(c)).toBe(false);
  });

  it('redacts every plugin\'s config section, which may hold its credentials', () => {
    const c = defaultConfig();
    c.plugins.config = { greeter: { token: 'secret' } };
    expect(redact(c).plugins.config).toEqual({ greeter: '[redacted]' });
    expect(c.plugins.config.greeter).toEqual({ token: 'secret' });
  });

  it('names the key and the problem', () => {
    expect(() => loadConfig({ home: home(), env: { DMS_PORT: '-1' } })).toThrow(/DMS_PORT: '-1' is not a valid rest.port/);
    expect(() => loadConfig({ home: home(), env: {}, flags: { 'rest.nope': 1 } })).toThrow(/--rest.nope: no such configuration key/);
    const h = home();
    writeFileSync(join(h, 'dms_config.json'), JSON.stringify({ actor: { mailbox_capacity: 0 } }));
    expect(() => loadConfig({ home: h, env: {} })).toThrow(/actor.mailbox_capacity/);
  });

  it('refuses a general.name longer than a profile may hold, which made every peer refuse the whole profile', () => {
    const h = home();
    writeFileSync(join(h, 'dms_config.json'), JSON.stringify({ general: { name: 'n'.repeat(201) } }));
    expect(() => loadConfig({ home: h, env: {} })).toThrow(/general.name: .*200/);
    writeFileSync(join(h, 'dms_config.json'), JSON.stringify({ general: { name: 'n'.repeat(200) } }));
    expect(loadConfig({ home: h, env: {} }).general.name).toHaveLength(200);
  });

  it('allows unsigned envelopes by default only on loopback', () => {
    const c = defaultConfig();
    expect(allowsUnsigned(c)).toBe(true);
    c.rest.addr = '0.0.0.0';
    expect(allowsUnsigned(c)).toBe(false);
    c.rest.allow_unsigned = true;
    expect(allowsUnsigned(c)).toBe(true);
  });
});
