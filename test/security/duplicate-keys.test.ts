/**
 * JSON with a key twice, from outside, against a real node (in this process: its REST server
 * and its libp2p transport are the real ones). JSON.parse keeps the last of two values; a proxy,
 * an auditing tool or another implementation of the wire format may keep the first, and then
 * it and the node disagree about what was sent or signed. The node refuses such text wherever
 * it comes from: a REST body (400 naming the key and where), an envelope over REST (400) or
 * over libp2p (dropped as undecodable), and a payload inside an envelope (an error reply).
 */
import { peerIdFromString } from '@libp2p/peer-id';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { encodeFrame } from '../../runtime/network/frames.js';
import { ACTOR_PROTOCOL } from '../../runtime/network/libp2p-transport.js';
import { nextNonce } from '../../runtime/time.js';
import { decodePayload, encodeEnvelope, type Envelope, parseEnvelope } from '../../runtime/wire/envelope.js';
import { envelope, newCaller, post, signEnvelopeSync } from '../helpers/envelopes.js';
import { type LocalNode, startLocalNode } from '../helpers/local-node.js';
import { waitFor } from '../helpers/network.js';
import { type ForeignPeer, type StrangerAtNodeScene, strangerBesideANode } from '../helpers/peer.js';

let scene: StrangerAtNodeScene<LocalNode> | undefined;
let node: LocalNode;
let peer: ForeignPeer;

beforeAll(async () => void ({ node, peer } = scene = await strangerBesideANode(() => startLocalNode({ timeoutMs: 45_000 }))), 60_000);
afterAll(() => scene?.stop());

const inbox = (name: string) => ({ id: '', did: '', addr: { host: '', inbox: name } });
const utf8 = (text: string) => new Uint8Array(Buffer.from(text, 'utf8'));

/** A JSON body as text, with the method its route takes. */
const body = (path: string, text: string) => post(`${node.url}${path}`, text, path === '/api/v1/device/config' ? { method: 'PUT' } : {});

/** `text` with `insert` put in right after the first occurrence of `after` (which must be there). */
function inject(text: string, after: string, insert: string): string {
  const at = text.indexOf(after);
  if (at < 0) throw new Error(`${after} not in ${text}`);
  return text.slice(0, at + after.length) + insert + text.slice(at + after.length);
}

describe('a REST JSON body with a key twice', () => {
  it('is refused with 400 naming the key and where, however equal the values', async () => {
    const cases: [string, string, string][] = [
      ['/api/v1/jobs', '{"name":"dup","image":"a","image":"b","executor":"null"}', 'job spec: duplicate key "image" in the request body'],
      ['/api/v1/jobs', '{"name":"dup","image":"a","image":"a","executor":"null"}', 'job spec: duplicate key "image" in the request body'],
      ['/api/v1/jobs', '{"name":"dup","image":"a","executor":"null","resources":{"cpu":0.1,"cpu":0.5}}', 'job spec: duplicate key "cpu" at resources in the request body'],
      ['/api/v1/device/config', '{"labels":{"zone":"a","zone":"b"}}', 'device settings: duplicate key "zone" at labels in the request body'],
      // Escaped or not, it is the same key.
      ['/api/v1/device/config', '{"name":"x","\\u006eame":"y"}', 'device settings: duplicate key "name" in the request body'],
      ['/api/v1/pins', '[1,{"cid":"a"},{"cid":"b","cid":"c"}]', 'pin: duplicate key "cid" at [2] in the request body'],
    ];
    for (const [path, text, error] of cases) {
      const r = await body(path, text);
      expect(r.status, `${path} ${text}: ${r.text}`).toBe(400);
      expect(r.json.error, text).toBe(error);
    }
    // None of them was taken: no job, and the device keeps its name and labels.
    const jobs = await fetch(`${node.url}/api/v1/jobs`).then((r) => r.json());
    expect(jobs).toEqual([]);
    const status = await fetch(`${node.url}/api/v1/device/status`).then((r) => r.json());
    expect(status.name).not.toMatch(/^[xy]$/);
  });

  it('takes the same keys in different objects, and a key equal to another only in its text', async () => {
    const r = await body('/api/v1/device/config', '{"name":"edge-1","labels":{"name":"a","zone":"b"}}');
    expect(r.status, r.text).toBe(200);
    const same = await body('/api/v1/device/config', '{"labels":{"zone":"a","Zone":"b"}}');
    expect(same.status, same.text).toBe(200);
  });
});

describe('an envelope with a key twice, over REST', () => {
  const hello = () => encodeEnvelope(envelope(newCaller(false), { to: inbox('root'), be: '/public/hello', cont: '/private/r', ttlMs: 10_000 }));

  it('is refused with 400 naming the key and where, on send, invoke and broadcast', async () => {
    const cases: [string, string, string][] = [
      ['/api/v1/actor/invoke', inject(hello(), '{', '"be":"/dms/device/config",'), 'duplicate key "be" in the envelope'],
      // Equal values too: one rule for every reader.
      ['/api/v1/actor/invoke', inject(hello(), '{', '"be":"/public/hello",'), 'duplicate key "be" in the envelope'],
      ['/api/v1/actor/invoke', inject(hello(), '"opt":{', '"cont":"/private/elsewhere",'), 'duplicate key "cont" at opt in the envelope'],
      ['/api/v1/actor/send', inject(hello(), '"addr":{', '"inbox":"orchestrator",'), 'duplicate key "inbox" at to.addr in the envelope'],
      [
        '/api/v1/actor/broadcast',
        inject(encodeEnvelope(envelope(newCaller(false), { be: '/broadcast/hello', topic: '/dms/hello', ttlMs: 2_000 })), '"opt":{', '"topic":"/dms/hello",'),
        'duplicate key "topic" at opt in the envelope',
      ],
    ];
    for (const [path, body, error] of cases) {
      const r = await post(`${node.url}${path}`, body);
      expect(r.status, `${path} ${body}: ${r.text}`).toBe(400);
      expect(r.json.error, body).toBe(error);
    }
  });

  it("has its payload's duplicate keys refused by the behavior: an error reply naming the key and where", async () => {
    const env = envelope(newCaller(false), { to: inbox('orchestrator'), be: '/dms/job/status', cont: '/private/s', ttlMs: 10_000 });
    const cases: [string, string][] = [
      ['{"id":"00000000-0000-4000-8000-000000000001","id":"00000000-0000-4000-8000-000000000002"}', 'msg: duplicate key "id"'],
      ['{"id":"00000000-0000-4000-8000-000000000001","x":{"a":[{"b":1,"b":1}]}}', 'msg: duplicate key "b" at x.a[0]'],
    ];
    for (const [payload, error] of cases) {
      const r = await post(`${node.url}/api/v1/actor/invoke`, encodeEnvelope({ ...env, nonce: nextNonce(), msg: utf8(payload) }));
      expect(r.status, r.text).toBe(200);
      expect(decodePayload(parseEnvelope(r.text).msg)).toEqual({ error, kind: 'invalid' });
    }
  });
});

describe('an envelope with a key twice, over libp2p', () => {
  it('is dropped as undecodable, and the peer still gets its answers', async () => {
    const stream = await peer.transport.node.dialProtocol(peerIdFromString(node.peerId), ACTOR_PROTOCOL);
    const signed = (cont: string) => encodeEnvelope(peer.envelope(node, { be: '/public/hello', cont, ttlMs: 10_000 }));
    // Equal values: the signature checks out whichever is read.
    stream.send(encodeFrame(inject(signed('/private/equal'), '{', '"be":"/public/hello",')));
    // The signature covers the last; a reader of the first would see another behavior asked.
    stream.send(encodeFrame(inject(signed('/private/differ'), '{', '"be":"/dms/device/config",')));
    stream.send(encodeFrame(signed('/private/after')));
    await peer.waitReply('/private/after', 10_000);
    // Read in order from one stream, answered by one actor: an answer to either would be here by now.
    await new Promise((r) => setTimeout(r, 300));
    expect(peer.arrived.map((e) => e.be)).not.toContain('/private/equal');
    expect(peer.arrived.map((e) => e.be)).not.toContain('/private/differ');
    await waitFor('the refusal in the log', () => node.logs().includes('undecodable envelope dropped'), { timeoutMs: 5_000 });
    expect(node.logs()).toContain('duplicate key \\"be\\" in the envelope');
    await stream.close();
  });

  it("has its payload's duplicate keys refused: an error reply naming the key", async () => {
    const env: Envelope = peer.envelope(node, { be: '/public/hello', cont: '/private/payload', ttlMs: 10_000 });
    env.msg = utf8('{"a":1,"a":2}');
    await peer.send(signEnvelopeSync(env, peer.key));
    const reply = await peer.waitReply('/private/payload', 10_000);
    expect(decodePayload(reply.msg)).toEqual({ error: 'msg: duplicate key "a"', kind: 'invalid' });
  });
});
