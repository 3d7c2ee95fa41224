import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { KeyPair } from '../../runtime/crypto/keys.js';
import { decodePayload, type Envelope } from '../../runtime/wire/envelope.js';
import { newCaller, post, rootOf, wire } from '../helpers/envelopes.js';
import { waitFor } from '../helpers/network.js';
import { type NodeProcess, runCli, startNode } from '../helpers/node.js';
import { type ForeignPeer, type StrangerAtNodeScene, strangerBesideANode } from '../helpers/peer.js';

/**
 * Issue 26, replay rows, against real node processes: the replay cache's shares are counted per
 * authenticated libp2p peer (whatever `from.id` its envelopes carry) and, for envelopes the node
 * signs as the operator for REST callers, against a quota of their own. A peer over its share,
 * or REST over its quota, is refused; a genuine peer and the operator's own calls still get in.
 */

const CAPACITY = 200;
// 180 of the 200 entries are open to untrusted senders: one peer may hold 40 of them.
const PER_PEER = 40;
const REST_QUOTA = 6;
const hello = { be: '/public/hello', ttlMs: 60_000 };

const payloadOf = (env: Envelope) => decodePayload(env.msg) as { did?: string; error?: string; kind?: string };

describe('one connection, many throwaway from.id keys (HIGH)', () => {
  let scene: StrangerAtNodeScene | undefined;
  let node: NodeProcess;
  let attacker: ForeignPeer;
  let genuine: ForeignPeer;

  beforeAll(async () => {
    scene = await strangerBesideANode(() => startNode({ config: { actor: { replay_capacity: CAPACITY, replay_per_peer: PER_PEER } } }), 2);
    ({ node, peers: [attacker, genuine] } = scene);
  }, 60_000);
  afterAll(() => scene?.stop());

  it('holds the peer to replay_per_peer entries whatever keys it signs with; another peer is still served', { timeout: 90_000 }, async () => {
    // 19 keys, 12 envelopes each: more than the whole open share, from one connection.
    const keys = Array.from({ length: 19 }, () => KeyPair.generate());
    const flood = keys.flatMap((key) => Array.from({ length: 12 }, () => attacker.envelope(node, { ...hello, key, cont: '/private/flood' })));
    for (const env of flood) await attacker.send(env);
    const replies = await waitFor(
      `replies to all ${flood.length} flood envelopes`,
      () => {
        const got = attacker.replies('/private/flood');
        return got.length >= flood.length ? got : undefined;
      },
      { timeoutMs: 45_000, intervalMs: 100 },
    );
    const answered = replies.map(payloadOf);
    expect(answered.filter((p) => p.did === node.did)).toHaveLength(PER_PEER);
    const refusals = new Set(answered.filter((p) => p.error !== undefined).map((p) => `${p.kind}: ${p.error}`));
    expect([...refusals]).toEqual([
      `overloaded: peer ${attacker.host} already holds ${PER_PEER} unexpired envelopes in the replay cache (actor.replay_per_peer); retry once some expire`,
    ]);

    // The control: another peer, and a REST caller, are admitted as before.
    await genuine.send(genuine.envelope(node, { ...hello, cont: '/private/genuine' }));
    expect(payloadOf(await genuine.waitReply('/private/genuine', 20_000))).toEqual({ did: node.did });
    const rest = await post(`${node.url}/api/v1/actor/invoke`, wire(newCaller(), { ...hello, to: rootOf(node.peerId), host: node.peerId, cont: '/private/r' }));
    expect(rest.status, rest.text).toBe(200);
    // And the attacker is still refused, under a key it never used.
    await attacker.send(attacker.envelope(node, { ...hello, key: KeyPair.generate(), cont: '/private/again' }));
    expect(payloadOf(await attacker.waitReply('/private/again', 20_000)).error).toMatch(/actor\.replay_per_peer/);
  });
});

describe('REST envelopes the node signs as the operator (LOW)', () => {
  let scene: StrangerAtNodeScene | undefined;
  let node: NodeProcess;
  let peer: ForeignPeer;

  beforeAll(async () => void ({ node, peer } = scene = await strangerBesideANode(() => startNode({ config: { actor: { replay_capacity: CAPACITY, replay_rest_quota: REST_QUOTA } } }))), 60_000);
  afterAll(() => scene?.stop());

  it('hold at most replay_rest_quota entries; the operator, a peer and a signed REST caller still get in', { timeout: 90_000 }, async () => {
    const statuses: number[] = [];
    let refusal = '';
    for (let i = 0; i < CAPACITY && !refusal; i++) {
      const res = await post(`${node.url}/api/v1/actor/send`, wire(newCaller(false), { ...hello, to: rootOf(node.peerId), host: node.peerId }));
      statuses.push(res.status);
      if (res.status !== 200) refusal = `${res.status} ${res.json?.error}`;
    }
    expect(statuses.filter((s) => s === 200)).toHaveLength(REST_QUOTA);
    expect(refusal).toBe(
      `503 REST envelopes this node signed as the operator already hold ${REST_QUOTA} unexpired entries in the replay cache (actor.replay_rest_quota); retry once some expire`,
    );

    // The operator's own `dms actor invoke` signs with the operator key: it is not in that quota.
    const cli = await runCli(['--home', node.home, '--json', 'actor', 'invoke', '/public/hello']);
    expect(cli.code, cli.stderr).toBe(0);
    expect(JSON.parse(cli.stdout).payload).toEqual({ did: node.did });
    // A network peer and a REST caller with a key of its own are served.
    await peer.send(peer.envelope(node, { ...hello, cont: '/private/peer' }));
    expect(payloadOf(await peer.waitReply('/private/peer', 20_000))).toEqual({ did: node.did });
    const signed = await post(`${node.url}/api/v1/actor/invoke`, wire(newCaller(), { ...hello, to: rootOf(node.peerId), host: node.peerId, cont: '/private/r' }));
    expect(signed.status, signed.text).toBe(200);
    // The quota still holds for the next unsigned one.
    const again = await post(`${node.url}/api/v1/actor/send`, wire(newCaller(false), { ...hello, to: rootOf(node.peerId), host: node.peerId }));
    expect(again.status).toBe(503);
  });
});
