import { copyFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DmsClient } from '../../client/client.js';
import { KeyPair } from '../../runtime/crypto/keys.js';
import { decodePayload } from '../../runtime/wire/envelope.js';
import { testActor } from '../helpers/actor.js';
import { waitFor } from '../helpers/network.js';
import { type LocalNode, startLocalNode } from '../helpers/local-node.js';
import { tempHome } from '../helpers/node.js';
import { type ForeignPeer, type StrangerScene, strangerBesideTwoNodes } from '../helpers/peer.js';
import { nullJob, Rest } from '../jobs/helpers.js';

/**
 * The capability check where an actor runs a behavior (Actor.dispatch), for envelopes that
 * never pass the REST pre-check: from a foreign libp2p peer, relayed by an actor on the
 * caller's behalf, and from an actor of another node. Each is refused with a forbidden error
 * reply and the behavior (a probe plugin counting its runs) does not run.
 */

let a: LocalNode;
let b: LocalNode;
let scene: StrangerScene<LocalNode> | undefined;
let peer: ForeignPeer;

beforeAll(async () => {
  const home = tempHome();
  copyFileSync(new URL('../fixtures/plugins/probe.mjs', import.meta.url), join(home, 'probe.mjs'));
  scene = await strangerBesideTwoNodes({ start: startLocalNode, node: (i) => (i === 0 ? { home, config: { plugins: { modules: ['./probe.mjs'] } } } : {}) });
  ({ a, b, peer } = scene);
  // A relay as a plugin could write one: it forwards the caller's own envelope (its from, its
  // signature, its cont) to /plugin/probe/poke, checking nothing on the way, so only the
  // dispatch-time capability check stands between.
  await testActor(a.node.system, {
    inbox: 'relay',
    behaviors: [
      {
        name: '/public/probe/relay',
        noReply: true,
        handle: async ({ env, actor }) => {
          await actor.system.route({ ...env, to: { ...env.to, addr: { host: '', inbox: 'probe' } }, be: '/plugin/probe/poke' });
        },
      },
    ],
  });
}, 120_000);
afterAll(() => scene?.stop());

const TTL_MS = 20_000;
const denied = (did: string) => `capability /plugin/probe/poke not granted to ${did}`;
const pokes = async () => (await new DmsClient({ url: a.url, timeoutMs: TTL_MS }).invoke<{ pokes: number }>({ inbox: 'probe' }, '/public/probe/count', {})).payload.pokes;

describe('the dispatch-time capability check', () => {
  it('refuses a foreign peer’s signed envelope from the network', async () => {
    const env = peer.envelope(a, { be: '/plugin/probe/poke', inbox: 'probe', cont: '/private/r/poke' });
    await peer.send(env);
    const reply = await peer.waitReply('/private/r/poke');
    expect(decodePayload(reply.msg)).toEqual({ error: denied(peer.key.did), kind: 'forbidden' });
    expect(reply.from.addr.host).toBe(a.peerId);
    expect(await pokes()).toBe(0);
  });

  it('refuses a foreign peer’s forged executor report, so no stranger can end a job', async () => {
    const rest = new Rest(a.url);
    const job = await rest.submit(nullJob({ durationMs: 60_000 }));
    const running = await rest.waitFor(job.id, ['running']);
    const handle = { executor: 'null', job_id: job.id, id: running.container_id };
    const env = peer.envelope(a, {
      be: '/dms/job/exited',
      inbox: 'orchestrator',
      cont: '/private/r/forged-exit',
      payload: { runs: [{ job_id: job.id, handle, result: { exit_code: 0, oom_killed: false } }] },
    });
    await peer.send(env);
    const reply = await peer.waitReply('/private/r/forged-exit');
    expect(decodePayload(reply.msg)).toEqual({ error: `capability /dms/executor/report not granted to ${peer.key.did}`, kind: 'forbidden' });
    expect(await rest.job(job.id)).toMatchObject({ status: 'running' });
    await rest.delete(`/api/v1/jobs/${job.id}`);
  });

  it('refuses a caller’s envelope that an actor of the node relays to the behavior', async () => {
    const stranger = KeyPair.generate();
    // /public/probe/relay is open, so the REST pre-check lets the request in; the relayed copy keeps the stranger's from.
    const reply = await new DmsClient({ url: a.url, key: stranger, timeoutMs: TTL_MS }).invoke<{ error?: string }>({ inbox: 'relay' }, '/public/probe/relay', {}, { raw: true, ttlMs: TTL_MS });
    expect(reply.payload).toEqual({ error: denied(stranger.did), kind: 'forbidden' });
    expect(reply.env.from.addr.inbox).toBe('probe');
    expect(await pokes()).toBe(0);
  });

  it('refuses an actor of another node (its REST pre-check does not judge remote destinations)', async () => {
    const bOperator = b.operator().did;
    const client = new DmsClient({ url: b.url, timeoutMs: TTL_MS });
    const reply = await waitFor('B to reach A', async () => {
      const r = await client.invoke<{ error?: string }>({ host: a.peerId, inbox: 'probe' }, '/plugin/probe/poke', {}, { raw: true, ttlMs: TTL_MS });
      return r.payload;
    }, { timeoutMs: 45_000 });
    expect(reply).toEqual({ error: denied(bOperator), kind: 'forbidden' });
    expect(await pokes()).toBe(0);
  });

  it('lets the node’s own operator run it, so the zero counts above are refusals', async () => {
    const reply = await new DmsClient({ url: a.url, timeoutMs: TTL_MS }).invoke<{ pokes: number }>({ inbox: 'probe' }, '/plugin/probe/poke', {}, { raw: true });
    expect(reply.payload).toEqual({ pokes: 1 });
    expect(await pokes()).toBe(1);
    expect((await fetch(`${a.url}/health`)).status).toBe(200);
  });
});

describe('a behavior that fails with a non-DMS error', () => {
  it('answers "internal error (id …)" and the node logs that id, never the caller the raw message', async () => {
    const reply = await new DmsClient({ url: a.url, timeoutMs: TTL_MS }).invoke<{ error: string }>({ inbox: 'probe' }, '/public/probe/crash', {}, { raw: true });
    const id = /^internal error \(id ([0-9a-f]{8})\)$/.exec(reply.payload.error)?.[1];
    expect(id, reply.payload.error).toBeDefined();
    expect(JSON.stringify(reply.payload)).not.toContain('secret-token');
    const line = await waitFor('the log line with the error id', () => a.logs().split('\n').find((l) => l.includes(`"error_id":"${id}"`)));
    expect(line).toContain('secret-token-1234');
    expect(line).toContain(`internal error (id ${id})`);
  });
});
