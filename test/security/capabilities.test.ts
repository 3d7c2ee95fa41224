import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DmsClient } from '../../client/client.js';
import { type ClientError } from '../../client/errors.js';
import { encodeTokenList, issueToken, tokenFromText } from '../../runtime/capability/token.js';
import { KeyPair } from '../../runtime/crypto/keys.js';
import { readKey } from '../../runtime/home.js';
import { msToNs, nowNs } from '../../runtime/time.js';
import { encodeEnvelope } from '../../runtime/wire/envelope.js';
import { envelope, post, rootOf } from '../helpers/envelopes.js';
import { waitFor } from '../helpers/network.js';
import { type NodeProcess, removeHome, runCli, startNode, tempHome } from '../helpers/node.js';

/**
 * Capabilities against a real node process, driven by the real CLI: a second key is refused
 * at once (403, naming the capability) until `dms cap grant`, and tokens attached to envelopes
 * (`--cap`, delegation chains) authorize exactly what they say.
 */

let node: NodeProcess;
const dms = (...args: string[]) => runCli(['--home', node.home, ...args]);

/** Polls `fn` until it returns true; the node re-reads its anchors within about a second. */
const eventually = (fn: () => Promise<boolean>, what: string, timeoutMs = 20_000): Promise<true> => waitFor(what, fn, { timeoutMs });

beforeAll(async () => {
  const home = tempHome();
  node = await startNode({ home, config: { network: { enabled: false } } });
});
afterAll(async () => {
  await node?.stop();
  removeHome(node.home);
});

async function newKey(name: string): Promise<KeyPair> {
  const r = await dms('key', 'new', name);
  expect(r.code, r.stderr).toBe(0);
  expect(r.stdout).toMatch(/unencrypted, readable only by you: mode 0600/);
  return readKey(join(node.home, 'keys', `${name}.json`));
}

const clientOf = (key: KeyPair, extra: Partial<ConstructorParameters<typeof DmsClient>[0]> = {}) => new DmsClient({ url: node.url, key, ...extra });

async function peersList(key: KeyPair, ttlMs = 10_000): Promise<{ status: number; error?: string }> {
  const res = await post(`${node.url}/api/v1/actor/invoke`, encodeEnvelope(envelope({ key, inbox: 'user-cap' }, { to: rootOf(node.peerId), be: '/dms/node/peers/list', cont: '/private/r', ttlMs })));
  return { status: res.status, error: res.json?.error };
}

describe('a second key', () => {
  it('is denied /dms/node/peers/list with 403 at once, then allowed after `dms cap grant`, and denied again once revoked', { timeout: 90_000 }, async () => {
    const second = await newKey('second');
    const TTL_MS = 60_000;
    const t0 = Date.now();
    const denied = await peersList(second, TTL_MS);
    expect(denied.status).toBe(403);
    expect(denied.error).toBe(`capability /dms/node/peers/list not granted to ${second.did}`);
    // At once: long before the call's expiry (the margin is for a loaded machine).
    expect(Date.now() - t0).toBeLessThan(TTL_MS / 3);

    // The CLI refuses the same way, in one line.
    const viaCli = await dms('actor', 'invoke', '/dms/node/peers/list', '--key', 'second');
    expect(viaCli.code).not.toBe(0);
    expect(viaCli.stderr.trim()).toBe(`dms: capability /dms/node/peers/list not granted to ${second.did} (HTTP 403)`);

    const grant = await dms('cap', 'grant', second.did, '--cap', '/dms/node/peers/list', '--expiry', '24h');
    expect(grant.code, grant.stderr).toBe(0);
    const token = tokenFromText(grant.stdout);
    expect(token).toMatchObject({ act: 'invoke', aud: second.did, cap: ['/dms/node/peers/list'], iss: node.operator().did });
    expect(token.exp - nowNs()).toBeGreaterThan(msToNs(23 * 3_600_000));

    await eventually(async () => (await peersList(second)).status === 200, 'the grant takes effect');
    const viaCliNow = await dms('actor', 'invoke', '/dms/node/peers/list', '--key', 'second');
    expect(viaCliNow.code, viaCliNow.stderr).toBe(0);
    expect(JSON.parse(viaCliNow.stdout)).toHaveProperty('peers');
    // Exactly what was granted: its sibling stays closed.
    const sibling = await dms('actor', 'invoke', '/dms/node/peers/self', '--key', 'second');
    expect(sibling.stderr).toMatch(/capability \/dms\/node\/peers\/self not granted .*HTTP 403/);

    const revoke = await dms('cap', 'revoke', grant.stdout.trim());
    expect(revoke.code, revoke.stderr).toBe(0);
    await eventually(async () => (await peersList(second)).status === 403, 'the revocation takes effect');
    const list = await dms('--json', 'cap', 'list');
    expect(JSON.parse(list.stdout).revoke).toHaveLength(1);
  });
});

describe('tokens attached to envelopes', () => {
  it('authorize what `dms cap new` signed, sent with --cap', async () => {
    const third = await newKey('third');
    const made = await dms('cap', 'new', third.did, '--cap', '/dms/node/peers/self', '--expiry', '1h');
    expect(made.code, made.stderr).toBe(0);
    const withCap = await dms('actor', 'invoke', '/dms/node/peers/self', '--key', 'third', '--cap', made.stdout.trim());
    expect(withCap.code, withCap.stderr).toBe(0);
    expect(JSON.parse(withCap.stdout).id).toBe(node.peerId);
    const without = await dms('actor', 'invoke', '/dms/node/peers/self', '--key', 'third');
    expect(without.stderr).toMatch(/HTTP 403/);
  });

  it('authorize through a delegation chain, and refuse one that widens', async () => {
    const lead = await newKey('lead');
    const member = await newKey('member');
    const root = await dms('cap', 'new', lead.did, '--cap', '/dms/node', '--depth', '1', '--expiry', '2h');
    expect(root.code, root.stderr).toBe(0);
    const child = await dms('cap', 'delegate', member.did, '--cap', '/dms/node/peers/self', '--expiry', '1h', '--key', 'lead', '--from', root.stdout.trim());
    expect(child.code, child.stderr).toBe(0);
    const ok = await clientOf(member).invoke('root', '/dms/node/peers/self', {}, { cap: encodeTokenList([tokenFromText(child.stdout)]) });
    expect((ok.payload as { id: string }).id).toBe(node.peerId);

    const wide = await dms('cap', 'delegate', member.did, '--cap', '/dms/job', '--key', 'lead', '--from', root.stdout.trim());
    expect(wide.code).not.toBe(0);
    expect(wide.stderr).toMatch(/cannot delegate: capabilities \/dms\/job are broader/);
    // Forged by hand past the CLI's check, the node refuses it and says why.
    const forged = issueToken(lead, { act: 'invoke', aud: member.did, cap: ['/dms/node/peers/list'], exp: nowNs() + msToNs(60_000), chain: issueToken(member, { act: 'delegate', aud: lead.did, cap: ['/'], exp: nowNs() + msToNs(60_000), depth: 1 }) });
    const err = (await clientOf(member)
      .invoke('root', '/dms/node/peers/list', {}, { cap: encodeTokenList([forged]) })
      .catch((e: unknown) => e)) as ClientError;
    expect(err.status).toBe(403);
    expect(err.nodeError).toMatch(/not trusted by this node \(wrong issuer\)/);
  });

  it('refuses junk tokens with 403 and a reason, never a 500', async () => {
    const key = KeyPair.generate();
    for (const junk of ['not json', '[1]', '{}', '[{"v":1}]', `[${'['.repeat(3000)}]`]) {
      const err = (await clientOf(key)
        .invoke('root', '/dms/node/peers/list', {}, { cap: new TextEncoder().encode(junk) })
        .catch((e: unknown) => e)) as ClientError;
      expect(err.status, junk).toBe(403);
      expect(err.nodeError).toMatch(/capability \/dms\/node\/peers\/list not granted .*\(cap/);
    }
    expect((await fetch(`${node.url}/health`)).status).toBe(200);
  });
});

describe('broadcast', () => {
  it('is open on /dms/hello, and needs a broadcast token on other topics', async () => {
    const key = KeyPair.generate();
    const hello = await clientOf(key).broadcast('/dms/hello', '/broadcast/hello', {}, { limit: 1 });
    expect(hello).toHaveLength(1);
    const err = (await clientOf(key).broadcast('/dms/ops', '/broadcast/hello', {}, { ttlMs: 10_000 }).catch((e: unknown) => e)) as ClientError;
    expect(err.status).toBe(403);
    expect(err.nodeError).toBe(`broadcast on topic /dms/ops not granted to ${key.did}`);
    const token = issueToken(node.operator(), { act: 'broadcast', aud: key.did, cap: [], topic: ['/dms/ops'], exp: nowNs() + msToNs(60_000) });
    // Nobody subscribes to /dms/ops here: the broadcast is allowed and collects no replies.
    expect(await clientOf(key, { provide: [token] }).broadcast('/dms/ops', '/broadcast/hello', {}, { ttlMs: 500 })).toEqual([]);
  });
});
