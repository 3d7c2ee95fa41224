import { copyFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DmsClient } from '../../client/client.js';
import { decodePayload } from '../../runtime/wire/envelope.js';
import { DevEvents } from '../helpers/network.js';
import { type NodeProcess, removeHome, startNode, tempHome } from '../helpers/node.js';
import { ForeignPeer } from '../helpers/peer.js';

/**
 * Reply reflection against a real node: a stranger broadcasts a hello whose from.addr names
 * the victim node and whose opt.cont names a plugin behavior. If the victim believed the
 * from.addr.host of a gossip envelope, its root actor would reply to itself, signed with the
 * node key it trusts as its own, and run the plugin behavior with the node's authority.
 */

let victim: NodeProcess;
let peer: ForeignPeer;
let watch: DevEvents;

beforeAll(async () => {
  const home = tempHome();
  copyFileSync(new URL('../fixtures/plugins/probe.mjs', import.meta.url), join(home, 'probe.mjs'));
  victim = await startNode({ home, env: { DMS_DEBUG: 'true' }, config: { plugins: { modules: ['./probe.mjs'] } } });
  peer = await ForeignPeer.start();
  await peer.connect(victim);
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
