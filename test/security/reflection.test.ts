import { copyFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DmsClient } from '../../client/client.js';
import { decodePayload, encodeEnvelope } from '../../runtime/wire/envelope.js';
import { KeyPair } from '../../runtime/crypto/keys.js';
import { envelope, post, rootOf } from '../helpers/envelopes.js';
import { DevEvents, waitFor } from '../helpers/network.js';
import { type LocalNode, startLocalNode } from '../helpers/local-node.js';
import { removeHome, tempHome } from '../helpers/node.js';
import { ForeignPeer } from '../helpers/peer.js';

/**
 * Reply reflection against a real node: a stranger broadcasts a hello whose from.addr names
 * the victim node and whose opt.cont names a plugin behavior. If the victim believed the
 * from.addr.host of a gossip envelope, its root actor would reply to itself, signed with the
 * node key it trusts as its own, and run the plugin behavior with the node's authority.
 */

let victim: LocalNode;
let peer: ForeignPeer;
let watch: DevEvents;

beforeAll(async () => {
  const home = tempHome();
  copyFileSync(new URL('../fixtures/plugins/probe.mjs', import.meta.url), join(home, 'probe.mjs'));
  victim = await startLocalNode({ home, env: { DMS_DEBUG: 'true' }, config: { plugins: { modules: ['./probe.mjs'] } } });
  peer = await ForeignPeer.connectedTo(victim);
  watch = await DevEvents.open(victim.url, ['dead-letter', 'envelope']);
}, 60_000);
afterAll(async () => {
  watch?.close();
  await peer?.stop();
  await victim?.stop();
  if (victim) removeHome(victim.home);
});

const client = () => new DmsClient({ url: victim.url, timeoutMs: 20_000 });
const pokes = async () => (await client().invoke<{ pokes: number }>({ inbox: 'probe' }, '/public/probe/count', {})).payload.pokes;

describe('a gossiped envelope whose from.addr.host is not its publisher', () => {
  it('is refused, so the victim never replies into its own plugin behavior', async () => {
    expect(await pokes()).toBe(0);
    const attacks = [victim.peerId, ''].map((host) => ({
      host,
      env: peer.envelope(undefined, { be: '/broadcast/hello', topic: '/dms/hello', host, fromInbox: 'probe', cont: '/plugin/probe/poke' }),
    }));
    for (const { env } of attacks) await peer.publish(env);
    // An honest broadcast from the same peer is answered: the gossip path works, so the silence is refusal.
    const honest = peer.envelope(undefined, { be: '/broadcast/hello', topic: '/dms/hello', cont: '/private/b/honest' });
    await peer.publish(honest);
    const reply = await peer.waitReply('/private/b/honest');
    expect(decodePayload(reply.msg)).toEqual({ did: victim.did });
    expect(await pokes()).toBe(0);
    for (const { host, env } of attacks) {
      const dropped = await watch.waitFor(`the dead letter of the attack from host '${host}'`, (e) => e.type === 'dead-letter' && e.nonce === String(env.nonce));
      expect(dropped).toMatchObject({ reason: `from.addr.host ${host || '(empty)'} is not the publishing peer ${peer.host}` });
    }
    expect(await pokes()).toBe(0);
    expect(watch.find((e) => e.type === 'envelope' && e.direction === 'in' && e.actor === 'probe' && e.behavior === '/plugin/probe/poke')).toBeUndefined();
    expect((await fetch(`${victim.url}/health`)).status).toBe(200);
  });
});

describe('a request whose from and opt.cont name an ordinary behavior of the node', () => {
  it('gets its reply dropped: the node never runs a behavior of its own as a reply', async () => {
    const before = await pokes();
    // A stranger's signed request, over REST, to the root actor: the reply would go to this
    // node's probe actor at /plugin/probe/poke, signed with the node's key.
    const attacks = [victim.peerId, ''].map((host) =>
      envelope({ key: KeyPair.generate(), inbox: 'probe' }, { to: rootOf(victim.peerId), be: '/public/hello', host, cont: '/plugin/probe/poke', ttlMs: 20_000 }),
    );
    for (const env of attacks) {
      const r = await post(`${victim.url}/api/v1/actor/send`, encodeEnvelope(env));
      expect(r.status, r.text).toBe(200);
    }
    for (const env of attacks) {
      // The request itself was delivered and answered; its reply is what is dropped.
      await watch.waitFor(`the root actor to take nonce ${env.nonce}`, (e) => e.type === 'envelope' && e.direction === 'in' && e.nonce === String(env.nonce));
    }
    const dropped = () => watch.events.filter((e) => e.type === 'dead-letter' && e.reason === 'reply to /plugin/probe/poke at probe dropped: no reply waiter there');
    await waitFor('the replies to be dropped', () => dropped().length >= attacks.length);
    expect(await pokes()).toBe(before);
    expect(watch.find((e) => e.type === 'envelope' && e.direction === 'in' && e.actor === 'probe' && e.behavior === '/plugin/probe/poke')).toBeUndefined();
    expect((await fetch(`${victim.url}/health`)).status).toBe(200);
  });
});
