import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ClientError, DmsClient } from '../../client/index.js';
import { verifyEnvelope } from '../../runtime/crypto/signing.js';
import { initHome, readKey } from '../../runtime/home.js';
import { envelopeFromJson, parseJsonLossless } from '../../runtime/wire/envelope.js';
import { freePort } from '../helpers/network.js';
import { type NodeProcess, startNode } from '../helpers/node.js';
import { assertBuilt, cleanupHomes, dms, prepareHome, tempHome } from './helpers.js';

let node: NodeProcess;
let home: string;

beforeAll(async () => {
  assertBuilt();
  home = prepareHome('actor');
  node = await startNode({ home });
});

afterAll(async () => {
  await node?.stop();
  cleanupHomes();
});

/** One line `dms: <reason>` on stderr, nothing on stdout, non-zero exit. */
function expectFailure(r: { code: number; stdout: string; stderr: string }, reason: RegExp | string): void {
  expect(r.code).not.toBe(0);
  expect(r.stdout).toBe('');
  const lines = r.stderr.trim().split('\n');
  expect(lines).toHaveLength(1);
  expect(lines[0]).toMatch(/^dms: /);
  if (typeof reason === 'string') expect(lines[0]).toContain(reason);
  else expect(lines[0]).toMatch(reason);
}

describe.concurrent('dms actor', { timeout: 90_000 }, () => {
  it('handle prints the root handle with the node host', async () => {
    const r = await dms(home, ['actor', 'handle']);
    expect(r.code, r.stderr).toBe(0);
    expect(JSON.parse(r.stdout)).toEqual({ id: node.did.slice('did:key:'.length), did: node.did, addr: { host: node.peerId, inbox: 'root' } });
  });

  it('invoke /public/hello prints the node did', async () => {
    const r = await dms(home, ['actor', 'invoke', '/public/hello']);
    expect(r.code, r.stderr).toBe(0);
    expect(JSON.parse(r.stdout)).toEqual({ did: node.did });
  });

  it('invoke --json prints the payload and the exact, verifiable reply envelope', async () => {
    const r = await dms(home, ['--json', 'actor', 'invoke', '/public/status', '{}', '--timeout', '10']);
    expect(r.code, r.stderr).toBe(0);
    // nonce and exp are written as bare integers with every digit.
    expect(r.stdout).toMatch(/"nonce": \d{19,20}\b/);
    const out = parseJsonLossless(r.stdout) as { payload: { did: string; status: string }; envelope: unknown };
    expect(out.payload).toMatchObject({ status: 'ok', did: node.did });
    const env = envelopeFromJson(out.envelope);
    await expect(verifyEnvelope(env)).resolves.toBeUndefined();
    expect(env.from.did).toBe(node.did);
    expect(env.to.did).toBe(readKey(join(home, 'keys', 'operator.json')).did);
  });

  it('invoke of an unknown behavior exits non-zero with the node error', async () => {
    expectFailure(await dms(home, ['actor', 'invoke', '/no/such/behavior']), /no behavior \/no\/such\/behavior.*\(HTTP 404\)/);
  });

  it('invoke to an unknown inbox names it', async () => {
    expectFailure(await dms(home, ['actor', 'invoke', '/public/hello', '--to', 'nobody']), "no actor with inbox 'nobody'");
  });

  it('invoke with a payload the behavior refuses reports the actor error', async () => {
    expectFailure(await dms(home, ['actor', 'invoke', '/public/hello', '[1,2]']), /\/public\/hello answered with an error: invalid payload/);
  });

  // An error reply is a failure whichever behavior answers it: the kernel's `{error, kind}`
  // above and a job behavior's alike (this one used to print the reply and exit 0).
  it('invoke of a behavior that answers an error reply exits non-zero with its text', async () => {
    const id = '00000000-0000-4000-8000-000000000000';
    const args = ['actor', 'invoke', '/dms/job/status', JSON.stringify({ id }), '--to', 'orchestrator'];
    expectFailure(await dms(home, args), new RegExp(`/dms/job/status answered with an error: .*${id}`));
    const j = await dms(home, ['--json', ...args]);
    expect(j.code).not.toBe(0);
    expect(j.stdout).toBe('');
    expect(JSON.parse(j.stderr.trim())).toMatchObject({ error: expect.stringContaining(id) });
  });

  it('invoke reads the payload from stdin with -, and accepts --to as JSON', async () => {
    const r = await dms(home, ['actor', 'invoke', '/public/hello', '-', '--to', '{"inbox":"root"}'], { input: '{}' });
    expect(r.code, r.stderr).toBe(0);
    expect(JSON.parse(r.stdout).did).toBe(node.did);
  });

  it('refuses a payload that is not JSON before contacting the node', async () => {
    expectFailure(await dms(home, ['actor', 'invoke', '/public/hello', '{oops']), 'payload is not valid JSON');
  });

  it('broadcast /broadcast/hello on /dms/hello collects the node reply', async () => {
    const r = await dms(home, ['actor', 'broadcast', '/broadcast/hello', '--topic', '/dms/hello', '--limit', '1']);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toContain(`reply from ${node.peerId}/root`);
    expect(r.stdout).toContain(`"did": "${node.did}"`);

    const j = await dms(home, ['--json', 'actor', 'broadcast', '/broadcast/hello', '{}', '--topic', '/dms/hello', '--limit', '1']);
    expect(j.code, j.stderr).toBe(0);
    const replies = parseJsonLossless(j.stdout) as { payload: { did: string }; envelope: unknown }[];
    expect(replies).toHaveLength(1);
    expect(replies[0].payload.did).toBe(node.did);
    await expect(verifyEnvelope(envelopeFromJson(replies[0].envelope))).resolves.toBeUndefined();
  });

  it('send delivers and says where', async () => {
    const r = await dms(home, ['actor', 'send', '/public/hello']);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout.trim()).toBe(`sent /public/hello to ${node.peerId}/root`);
    const j = await dms(home, ['--json', 'actor', 'send', '/public/hello', '{}']);
    expect(j.code, j.stderr).toBe(0);
    const out = parseJsonLossless(j.stdout) as { sent: boolean; envelope: unknown };
    expect(out.sent).toBe(true);
    await expect(verifyEnvelope(envelopeFromJson(out.envelope))).resolves.toBeUndefined();
  });

  it('send of an unknown behavior fails with the node error', async () => {
    expectFailure(await dms(home, ['actor', 'send', '/nope']), 'no behavior /nope');
  });
});

describe.concurrent('dms actor without a usable node', { timeout: 90_000 }, () => {
  it('says the node is unreachable and how to start it', async () => {
    const h = tempHome('unreachable');
    initHome(h);
    writeFileSync(join(h, 'dms_config.json'), JSON.stringify({ rest: { port: await freePort() } }));
    expectFailure(await dms(h, ['actor', 'invoke', '/public/hello']), /cannot reach the node at http:\/\/127\.0\.0\.1:\d+: connection refused; .*`dms start`/);
  });

  // The REST commands share the client's REST client, and its failures are worded in one place.
  it('says so the same way for the REST commands (jobs, allocations)', async () => {
    const h = tempHome('unreachable-rest');
    writeFileSync(join(h, 'dms_config.json'), JSON.stringify({ rest: { port: await freePort() } }));
    for (const args of [['jobs', 'list'], ['allocations', 'list']]) {
      const r = await dms(h, args);
      expectFailure(r, `: connection refused; no node answers there (home ${h})`);
      expect(r.stderr).toMatch(/^dms: cannot reach the node at http:\/\/127\.0\.0\.1:\d+: /);
    }
  });

  it('asks for dms init when the home has no operator key', async () => {
    expectFailure(await dms(tempHome('nokey'), ['actor', 'handle']), /no operator key at .*run `dms init`/);
  });
});

describe.concurrent('DmsClient against a running node', () => {
  const operator = () => readKey(join(home, 'keys', 'operator.json'));

  it('calls the typed root behaviors', async () => {
    const client = new DmsClient({ url: node.url, key: operator() });
    expect((await client.handle()).addr.host).toBe(node.peerId);
    expect(await client.hello()).toEqual({ did: node.did });
    const status = await client.status();
    expect(status).toMatchObject({ status: 'ok', did: node.did, peer_id: node.peerId });
    expect(status.actors).toContain('root');
    expect(Array.isArray(await client.peers())).toBe(true);
    expect((await client.peerSelf()).id).toBe(node.peerId);
    expect(await client.discover({ limit: 1 })).toEqual([{ did: node.did, host: node.peerId }]);
  });

  it('is accepted unsigned from loopback, the node signing as its operator', async () => {
    const client = new DmsClient({ url: node.url });
    const reply = await client.invoke<{ did: string }>('root', '/public/hello');
    expect(reply.payload.did).toBe(node.did);
    expect(reply.env.to.did).toBe(operator().did);
  });

  it('runs concurrent invokes from one client inbox', async () => {
    const client = new DmsClient({ url: node.url, key: operator() });
    const replies = await Promise.all(Array.from({ length: 20 }, () => client.hello()));
    expect(replies.every((r) => r.did === node.did)).toBe(true);
  });

  it('throws ClientError with the status and node text', async () => {
    const client = new DmsClient({ url: node.url, key: operator() });
    const err = await client.invoke('root', '/nope').catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ClientError);
    expect(err).toMatchObject({ kind: 'http', status: 404 });
    expect((err as ClientError).nodeError).toContain('no behavior /nope');
  });
});
