import { describe, expect, it } from 'vitest';
import { ClientError, DmsClient, type Handle, resolveTarget } from '../../client/index.js';
import { KeyPair } from '../../runtime/crypto/keys.js';
import { signEnvelopeSync } from '../helpers/envelopes.js';
import { verifyEnvelope } from '../../runtime/crypto/signing.js';
import { msToNs, nowNs } from '../../runtime/time.js';
import { decodePayload, emptyHandle, encodeEnvelope, encodePayload, type Envelope, parseEnvelope } from '../../runtime/wire/envelope.js';

const nodeKey = KeyPair.generate();
const nodeHandle: Handle = { id: nodeKey.id, did: nodeKey.did, addr: { host: nodeKey.peerId, inbox: 'root' } };
const URL_BASE = 'http://node.test:9999';

interface Seen {
  method: string;
  path: string;
  body?: string;
}

type Answer = (req: Seen, env?: Envelope) => Response;

/** A fetch that plays the node: serves the handle, hands every envelope request to `answer`. */
function fakeNode(answer: Answer = () => json({ message: 'message sent' })) {
  const seen: Seen[] = [];
  const fetchImpl = async (input: string | URL | Request, init?: RequestInit): Promise<Response> => {
    const url = new URL(String(input));
    const req: Seen = { method: init?.method ?? 'GET', path: url.pathname + url.search, body: init?.body as string | undefined };
    seen.push(req);
    if (url.pathname === '/api/v1/actor/handle') return json(nodeHandle);
    return answer(req, req.body ? parseEnvelope(req.body) : undefined);
  };
  return { seen, fetch: fetchImpl as typeof fetch };
}

const json = (v: unknown, status = 200) => new Response(JSON.stringify(v), { status, headers: { 'content-type': 'application/json' } });

/** The reply a node's actor would send: to the request's sender, at its cont, signed by the node. */
function replyTo(req: Envelope, payload: unknown, key = nodeKey, from: Handle = nodeHandle): Envelope {
  return signEnvelopeSync(
    { to: req.from, be: req.opt.cont!, from, nonce: nowNs() + 7n, opt: { exp: req.opt.exp }, msg: encodePayload(payload) },
    key,
  );
}

const replyResponse = (env: Envelope) => new Response(encodeEnvelope(env), { status: 200 });

describe('DmsClient envelopes', () => {
  it('builds signed envelopes that verify, from the client inbox on the node host', async () => {
    const key = KeyPair.generate();
    const node = fakeNode();
    const client = new DmsClient({ url: `${URL_BASE}/`, key, inbox: 'user-test', fetch: node.fetch });
    const before = nowNs();
    const env = await client.envelope('root', '/public/hello', { a: 1 }, { ttlMs: 2_000, cont: '/private/x', cap: Uint8Array.of(1, 2) });

    await expect(verifyEnvelope(env)).resolves.toBeUndefined();
    expect(env.to).toEqual(nodeHandle);
    expect(env.from).toEqual({ id: key.id, did: key.did, addr: { host: nodeKey.peerId, inbox: 'user-test' } });
    expect(env.be).toBe('/public/hello');
    expect(decodePayload(env.msg)).toEqual({ a: 1 });
    expect(env.opt.cont).toBe('/private/x');
    expect(env.cap).toEqual(Uint8Array.of(1, 2));
    expect(env.opt.exp).toBeGreaterThanOrEqual(before + msToNs(2_000));
    expect(env.opt.exp).toBeLessThanOrEqual(nowNs() + msToNs(2_000));
    // Round trip through the wire form keeps the signature valid (nonce/exp exceed 2^53).
    await expect(verifyEnvelope(parseEnvelope(encodeEnvelope(env)))).resolves.toBeUndefined();
    expect(client.url).toBe(URL_BASE);
  });

  it('gives each envelope a larger nonce and fetches the node handle once', async () => {
    const node = fakeNode();
    const client = new DmsClient({ url: URL_BASE, key: KeyPair.generate(), fetch: node.fetch });
    const a = await client.envelope('root', '/x', {});
    const b = await client.envelope('root', '/x', {});
    expect(b.nonce).toBeGreaterThan(a.nonce);
    expect(node.seen.filter((r) => r.path === '/api/v1/actor/handle')).toHaveLength(1);
    expect(client.inbox).toMatch(/^user-[0-9a-f]{16}$/);
  });

  it('leaves envelopes unsigned without a key, for the node to sign as its operator', async () => {
    const client = new DmsClient({ url: URL_BASE, fetch: fakeNode().fetch });
    const env = await client.envelope({ inbox: 'worker' }, '/x', new Uint8Array([0xff]));
    expect(env.sig).toBeUndefined();
    expect(env.from.id).toBe('');
    expect(env.from.addr.host).toBe(nodeKey.peerId);
    expect(env.to).toEqual({ id: '', did: '', addr: { host: nodeKey.peerId, inbox: 'worker' } });
    expect(env.msg).toEqual(new Uint8Array([0xff]));
  });

  it('builds broadcast envelopes with an empty destination and the topic', async () => {
    const key = KeyPair.generate();
    const client = new DmsClient({ url: URL_BASE, key, fetch: fakeNode().fetch });
    const env = await client.envelope('broadcast', '/broadcast/hello', {}, { topic: '/dms/hello' });
    expect(env.to).toEqual(emptyHandle());
    expect(env.opt.topic).toBe('/dms/hello');
    expect(encodeEnvelope(env)).toContain('"to":{}');
    await expect(verifyEnvelope(env)).resolves.toBeUndefined();
  });

  it('resolves targets against the node handle', () => {
    const remote = { id: 'z6Mkx', did: 'did:key:z6Mkx', addr: { host: '12D3KooWother', inbox: 'root' } };
    expect(resolveTarget('root', nodeHandle)).toEqual(nodeHandle);
    expect(resolveTarget({ inbox: 'root' }, nodeHandle)).toEqual(nodeHandle);
    // A JavaScript caller's string other than 'root' went to inbox '' (404 from the node).
    expect(() => resolveTarget('open-slow' as 'root', nodeHandle)).toThrowError(`a target is 'root', {inbox, host?} or a handle, not "open-slow"`);
    expect(resolveTarget({ host: '12D3KooWother', inbox: 'jobs' }, nodeHandle)).toEqual({ id: '', did: '', addr: { host: '12D3KooWother', inbox: 'jobs' } });
    expect(resolveTarget(remote, nodeHandle)).toEqual(remote);
  });
});

describe('DmsClient calls', () => {
  it('invoke posts a signed envelope with a unique cont and returns the verified reply payload', async () => {
    const node = fakeNode((req, env) => {
      expect(req.path).toBe('/api/v1/actor/invoke');
      return replyResponse(replyTo(env!, { did: nodeKey.did }));
    });
    const client = new DmsClient({ url: URL_BASE, key: KeyPair.generate(), fetch: node.fetch });
    const [a, b] = await Promise.all([client.invoke<{ did: string }>('root', '/public/hello'), client.hello()]);
    expect(a.payload.did).toBe(nodeKey.did);
    expect(b.did).toBe(nodeKey.did);
    const sent = node.seen.filter((r) => r.body).map((r) => parseEnvelope(r.body!));
    for (const env of sent) await expect(verifyEnvelope(env)).resolves.toBeUndefined();
    const conts = sent.map((env) => env.opt.cont);
    expect(conts[0]).toMatch(/^\/private\/reply\/\d+$/);
    expect(new Set(conts).size).toBe(2);
  });

  it('throws a ClientError carrying the HTTP status and the node error text', async () => {
    const client = new DmsClient({ url: URL_BASE, key: KeyPair.generate(), fetch: fakeNode(() => json({ error: 'actor root has no behavior /nope' }, 404)).fetch });
    const err = await client.invoke('root', '/nope').catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ClientError);
    expect(err).toMatchObject({ kind: 'http', status: 404, nodeError: 'actor root has no behavior /nope' });

    const timeout = new DmsClient({ url: URL_BASE, fetch: fakeNode(() => json({ error: 'no reply before opt.exp' }, 408)).fetch });
    await expect(timeout.invoke('root', '/slow')).rejects.toMatchObject({ kind: 'timeout', status: 408 });
  });

  it('throws on an {"error", "kind"} reply unless raw, which returns it with error and errorKind set', async () => {
    const node = fakeNode((_req, env) => replyResponse(replyTo(env!, { error: 'job j1 not found', kind: 'not_found' })));
    const client = new DmsClient({ url: URL_BASE, key: KeyPair.generate(), fetch: node.fetch });
    await expect(client.invoke('root', '/x')).rejects.toMatchObject({ kind: 'reply', status: 200, nodeError: 'job j1 not found', replyKind: 'not_found' });
    const raw = await client.invoke('root', '/x', {}, { raw: true });
    expect(raw).toMatchObject({ error: 'job j1 not found', errorKind: 'not_found', payload: { error: 'job j1 not found', kind: 'not_found' } });
  });

  it('takes an {"error"} reply without a kind (an older node) as an internal failure', async () => {
    const node = fakeNode((_req, env) => replyResponse(replyTo(env!, { error: 'invalid payload' })));
    const client = new DmsClient({ url: URL_BASE, key: KeyPair.generate(), fetch: node.fetch });
    await expect(client.invoke('root', '/x')).rejects.toMatchObject({ kind: 'reply', nodeError: 'invalid payload', replyKind: 'internal' });
  });

  it('does not mistake a payload that merely has an error field for an error reply', async () => {
    const job = { id: 'j1', status: 'failed', error: 'exit code 1' };
    const node = fakeNode((_req, env) => replyResponse(replyTo(env!, job)));
    const client = new DmsClient({ url: URL_BASE, key: KeyPair.generate(), fetch: node.fetch });
    expect((await client.invoke('root', '/jobs/get')).payload).toEqual(job);
  });

  it('rejects a reply whose signature does not verify', async () => {
    const node = fakeNode((_req, env) => {
      const reply = replyTo(env!, { did: 'x' });
      reply.msg = encodePayload({ did: 'forged' });
      return replyResponse(reply);
    });
    const client = new DmsClient({ url: URL_BASE, key: KeyPair.generate(), fetch: node.fetch });
    await expect(client.invoke('root', '/public/hello')).rejects.toMatchObject({ kind: 'protocol' });
    const trusting = new DmsClient({ url: URL_BASE, key: KeyPair.generate(), fetch: node.fetch, verifyReplies: false });
    expect((await trusting.invoke('root', '/public/hello')).payload).toEqual({ did: 'forged' });
  });

  it('broadcast sends ?limit, parses the reply array losslessly and keeps error replies', async () => {
    const other = KeyPair.generate();
    const otherHandle: Handle = { id: other.id, did: other.did, addr: { host: other.peerId, inbox: 'root' } };
    const node = fakeNode((req, env) => {
      expect(req.path).toBe('/api/v1/actor/broadcast?limit=2');
      expect(env!.to).toEqual(emptyHandle());
      expect(env!.opt.topic).toBe('/dms/hello');
      expect(env!.opt.cont).toMatch(/^\/private\/broadcast\/\d+$/);
      const a = replyTo(env!, { did: nodeKey.did });
      const b = replyTo(env!, { error: 'busy', kind: 'overloaded' }, other, otherHandle);
      return new Response(`[${encodeEnvelope(a)},${encodeEnvelope(b)}]`);
    });
    const client = new DmsClient({ url: URL_BASE, key: KeyPair.generate(), fetch: node.fetch });
    const replies = await client.broadcast('/dms/hello', '/broadcast/hello', {}, { limit: 2 });
    expect(replies.map((r) => r.payload)).toEqual([{ did: nodeKey.did }, { error: 'busy', kind: 'overloaded' }]);
    expect(replies[0].error).toBeUndefined();
    expect(replies[1]).toMatchObject({ error: 'busy', errorKind: 'overloaded' });
    expect(replies[0].env.nonce).toBeGreaterThan(2n ** 53n);
    expect(replies[0].env.opt.exp).toBeGreaterThan(nowNs());
    const found = await client.discover({ limit: 2 });
    expect(found).toEqual([{ did: nodeKey.did, host: nodeKey.peerId }]);
  });

  it('reports an unreachable node as such, with the socket reason', async () => {
    const refuse = (async () => {
      throw new TypeError('fetch failed', { cause: Object.assign(new Error('connect ECONNREFUSED'), { code: 'ECONNREFUSED' }) });
    }) as typeof fetch;
    const client = new DmsClient({ url: URL_BASE, fetch: refuse });
    const err = await client.handle().catch((e: unknown) => e);
    expect(err).toMatchObject({ kind: 'unreachable', status: 0 });
    expect((err as Error).message).toContain('connection refused');
  });

  it('send posts to /send and returns the envelope it sent', async () => {
    const node = fakeNode();
    const client = new DmsClient({ url: URL_BASE, key: KeyPair.generate(), fetch: node.fetch });
    const env = await client.send({ inbox: 'root' }, '/public/hello', { hi: true });
    const posted = node.seen.find((r) => r.path === '/api/v1/actor/send')!;
    expect(posted.body).toBe(encodeEnvelope(env));
    expect(env.opt.cont).toBeUndefined();
  });
});
