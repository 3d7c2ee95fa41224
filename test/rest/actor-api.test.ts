import { copyFileSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { idFromPublicKey } from '../../runtime/crypto/keys.js';
import { verifyEnvelope } from '../../runtime/crypto/signing.js';
import { nowNs, msToNs } from '../../runtime/time.js';
import { decodePayload, encodeEnvelope, envelopeFromJson, parseEnvelope, parseJsonLossless, U64_MAX } from '../../runtime/wire/envelope.js';
import { envelope, newCaller, post, rootOf, wire } from '../helpers/envelopes.js';
import { type LocalNode, startLocalNode } from '../helpers/local-node.js';
import { removeHome, tempHome } from '../helpers/node.js';

let node: LocalNode;

beforeAll(async () => {
  const home = tempHome();
  copyFileSync(new URL('../fixtures/plugins/slow.mjs', import.meta.url), join(home, 'slow.mjs'));
  node = await startLocalNode({ home, config: { plugins: { modules: ['./slow.mjs'] }, rest: { cors: { origins: ['http://localhost:9991', 'http://localhost:9992'] } } } });
});
afterAll(async () => {
  await node?.stop();
  removeHome(node.home);
});

const api = (path: string) => `${node.url}/api/v1/actor/${path}`;
const root = () => rootOf(node.peerId);
const operatorCaller = () => ({ ...newCaller(), key: node.operator() });

describe('health, config and handle', () => {
  it('answers /health and /api/v1/health', async () => {
    for (const p of ['/health', '/api/v1/health']) {
      const res = await fetch(node.url + p);
      expect(res.status).toBe(200);
      expect(await res.json()).toEqual({ status: 'ok' });
    }
  });

  it('hides the config outside debug mode', async () => {
    for (const p of ['/config', '/api/v1/config']) {
      const res = await fetch(node.url + p);
      expect(res.status).toBe(200);
      expect(await res.json()).toEqual({ config: 'allowed in debug mode' });
    }
  });

  it('returns the root handle, whose host is the peer id of the node did', async () => {
    const res = await fetch(api('handle'));
    expect(res.status).toBe(200);
    const h = await res.json();
    expect(h).toEqual({ id: node.did.slice('did:key:'.length), did: node.did, addr: { host: node.peerId, inbox: 'root' } });
  });

  it('answers an unknown route with 404 and an error body', async () => {
    const res = await fetch(`${node.url}/api/v1/nothing`);
    expect(res.status).toBe(404);
    expect((await res.json()).error).toMatch(/no route/);
  });

  it('answers a method a path does not have with 405, its Allow naming the methods it has', async () => {
    const job = '/api/v1/jobs/00000000-0000-4000-8000-000000000000';
    for (const [method, path, allow] of [
      ['PUT', '/api/v1/jobs', 'GET, HEAD, POST'],
      ['DELETE', '/api/v1/jobs', 'GET, HEAD, POST'],
      ['PATCH', '/api/v1/jobs', 'GET, HEAD, POST'],
      ['PUT', '/api/v1/jobs/', 'GET, HEAD, POST'],
      ['POST', job, 'DELETE, GET, HEAD'],
      ['GET', '/api/v1/actor/send', 'POST'],
      ['DELETE', '/health', 'GET, HEAD'],
    ]) {
      const res = await fetch(node.url + path, { method });
      expect(res.status, `${method} ${path}`).toBe(405);
      expect(res.headers.get('allow'), `${method} ${path}`).toBe(allow);
      expect((await res.json()).error).toBe(`method ${method} is not allowed on ${path}: it allows ${allow}`);
    }
    // A path no route has, with any method, is still no route.
    const none = await fetch(`${node.url}/api/v1/jobs/x/nothing`, { method: 'PUT' });
    expect(none.status).toBe(404);
    expect((await none.json()).error).toBe('no route PUT /api/v1/jobs/x/nothing');
    // An OPTIONS that is no preflight is answered as before.
    const options = await fetch(`${node.url}/api/v1/jobs`, { method: 'OPTIONS' });
    expect(options.status).toBe(404);
    expect(options.headers.get('allow')).toBeNull();
  });
});

describe('invoke', () => {
  it('returns the signed reply of /public/hello', async () => {
    const caller = newCaller();
    const req = envelope(caller, { to: root(), be: '/public/hello', cont: '/private/reply/1', host: node.peerId });
    const res = await post(api('invoke'), encodeEnvelope(req));
    expect(res.status).toBe(200);
    const reply = parseEnvelope(res.text);
    await verifyEnvelope(reply);
    expect(reply.be).toBe('/private/reply/1');
    expect(reply.to).toEqual(req.from);
    expect(reply.from.did).toBe(node.did);
    expect(reply.from.addr).toEqual({ host: node.peerId, inbox: 'root' });
    expect(reply.opt.exp).toBe(req.opt.exp);
    expect(reply.nonce).not.toBe(req.nonce);
    expect(decodePayload(reply.msg)).toEqual({ did: node.did });
  });

  it('answers every root behavior', async () => {
    // Non-public behaviors need a capability: the operator, a root of its node, holds them all.
    const caller = operatorCaller();
    const ask = async (be: string) => {
      const res = await post(api('invoke'), wire(caller, { to: root(), be, cont: '/private/r' }));
      expect(res.status, res.text).toBe(200);
      return decodePayload(parseEnvelope(res.text).msg) as any;
    };
    const status = await ask('/public/status');
    expect(status).toMatchObject({ status: 'ok', did: node.did, peer_id: node.peerId });
    expect(status.actors).toContain('root');
    expect(await ask('/dms/node/peers/self')).toMatchObject({ id: node.peerId });
    expect(await ask('/dms/node/peers/list')).toHaveProperty('peers');
    expect(await ask('/broadcast/hello')).toEqual({ did: node.did });
  });

  it('signs an unsigned envelope from a loopback caller as the operator', async () => {
    const caller = newCaller(false);
    const res = await post(api('invoke'), wire(caller, { to: root(), be: '/public/hello', cont: '/private/r' }));
    expect(res.status, res.text).toBe(200);
    const reply = parseEnvelope(res.text);
    expect(reply.to.did).toBe(node.operator().did);
    expect(reply.to.addr.inbox).toBe(caller.inbox);
  });

  // The answers come long before opt.exp: a timeout would take the whole TTL. The bound is a
  // fraction of it, generous for a loaded machine; the test's own timeout lies beyond the TTL,
  // so a regression fails on the bound, with the elapsed time.
  it('answers 404 at once for an unknown behavior or actor, not a timeout', { timeout: 90_000 }, async () => {
    const TTL_MS = 60_000;
    const caller = newCaller();
    const t0 = Date.now();
    const res = await post(api('invoke'), wire(caller, { to: root(), be: '/public/nope', cont: '/private/r', ttlMs: TTL_MS }));
    expect(res.status).toBe(404);
    expect(res.json.error).toBe('actor root has no behavior /public/nope');
    const res2 = await post(api('invoke'), wire(caller, { to: { ...root(), addr: { host: '', inbox: 'ghost' } }, be: '/public/hello', cont: '/private/r', ttlMs: TTL_MS }));
    expect(res2.status).toBe(404);
    expect(res2.json.error).toMatch(/no actor with inbox 'ghost'/);
    expect(Date.now() - t0).toBeLessThan(TTL_MS / 3);
  });

  it('answers 408 when no reply comes before opt.exp', async () => {
    const caller = operatorCaller();
    // The behavior answers long after opt.exp: the 408 comes at the expiry, not with the late reply.
    const BEHAVIOR_MS = 12_000;
    const t0 = Date.now();
    const res = await post(api('invoke'), wire(caller, { to: { ...root(), addr: { host: '', inbox: 'slow' } }, be: '/plugin/slow/wait', payload: { ms: BEHAVIOR_MS }, cont: '/private/r', ttlMs: 600 }));
    expect(res.status).toBe(408);
    expect(res.json.error).toMatch(/no reply before opt.exp/);
    expect(Date.now() - t0).toBeGreaterThanOrEqual(500);
    expect(Date.now() - t0).toBeLessThan(BEHAVIOR_MS - 2_000);
  });

  it('delivers to a plugin behavior', async () => {
    const caller = operatorCaller();
    const res = await post(api('invoke'), wire(caller, { to: { ...root(), addr: { host: '', inbox: 'slow' } }, be: '/plugin/slow/wait', payload: { ms: 5 }, cont: '/private/r' }));
    expect(res.status).toBe(200);
    expect(decodePayload(parseEnvelope(res.text).msg)).toEqual({ waited_ms: 5 });
  });

  it('replies with the validation error for a payload the behavior rejects', async () => {
    const caller = newCaller();
    const res = await post(api('invoke'), wire(caller, { to: root(), be: '/public/hello', payload: [1, 2], cont: '/private/r' }));
    expect(res.status).toBe(200);
    expect(decodePayload(parseEnvelope(res.text).msg)).toEqual({ error: expect.stringMatching(/^invalid payload for \/public\/hello/), kind: 'invalid' });
  });

  it('carries a job behavior error reply as {error, kind}, while its REST route still answers 404', async () => {
    const id = '00000000-0000-4000-8000-000000000000';
    const res = await post(api('invoke'), wire(operatorCaller(), { to: { ...root(), addr: { host: '', inbox: 'orchestrator' } }, be: '/dms/job/status', payload: { id }, cont: '/private/r' }));
    expect(res.status, res.text).toBe(200);
    expect(decodePayload(parseEnvelope(res.text).msg)).toEqual({ error: `job ${id} not found`, kind: 'not_found' });
    const rest = await fetch(`${node.url}/api/v1/jobs/${id}`);
    expect(rest.status).toBe(404);
    expect(await rest.json()).toEqual({ error: `job ${id} not found` });
  });

  it('keeps uint64 extremes exact', async () => {
    const caller = newCaller();
    const req = envelope(caller, { to: root(), be: '/public/hello', cont: '/private/r', nonce: U64_MAX });
    const res = await post(api('invoke'), encodeEnvelope(req));
    expect(res.status, res.text).toBe(200);
    expect(res.text).toContain(`"exp":${req.opt.exp}`);
    // An exp that far ahead parses exactly, and is refused: it is beyond actor.max_ttl_s.
    const far = await post(api('send'), encodeEnvelope(envelope(caller, { to: root(), be: '/public/hello', exp: U64_MAX })));
    expect(far.status).toBe(400);
    expect(far.json.error).toBe('opt.exp is more than actor.max_ttl_s (900 s) ahead');
  });
});

describe('send', () => {
  it('accepts a signed envelope', async () => {
    const res = await post(api('send'), wire(newCaller(), { to: root(), be: '/public/hello' }));
    expect(res.status).toBe(200);
    expect(res.json).toEqual({ message: 'message sent' });
  });

  it('refuses an unknown behavior with 404', async () => {
    const res = await post(api('send'), wire(newCaller(), { to: root(), be: '/no/such' }));
    expect(res.status).toBe(404);
  });
});

describe('broadcast', () => {
  const hello = (caller = newCaller(), ttlMs = 3_000) =>
    wire(caller, { be: '/broadcast/hello', topic: '/dms/hello', cont: '/private/hello', ttlMs });

  it('returns as soon as ?limit replies arrived', { timeout: 90_000 }, async () => {
    const TTL_MS = 60_000;
    const t0 = Date.now();
    const res = await post(`${api('broadcast')}?limit=1`, hello(newCaller(), TTL_MS));
    expect(res.status).toBe(200);
    // Long before opt.exp: the margin is for a loaded machine, not a speed claim.
    expect(Date.now() - t0).toBeLessThan(TTL_MS / 3);
    // Lossless: nonce and exp do not fit a JavaScript number.
    const replies = parseJsonLossless(res.text) as unknown[];
    expect(replies).toHaveLength(1);
    const reply = envelopeFromJson(replies[0]);
    await verifyEnvelope(reply);
    expect(decodePayload(reply.msg)).toEqual({ did: node.did });
  });

  it('collects until opt.exp without a limit', async () => {
    const t0 = Date.now();
    const res = await post(api('broadcast'), hello(newCaller(), 800));
    expect(res.status).toBe(200);
    expect(Date.now() - t0).toBeGreaterThanOrEqual(700);
    expect(JSON.parse(res.text)).toHaveLength(1);
  });

  it('gives an unsigned broadcast a reply behavior', async () => {
    const caller = newCaller(false);
    const res = await post(`${api('broadcast')}?limit=1`, wire(caller, { be: '/broadcast/hello', topic: '/dms/hello', ttlMs: 5_000 }));
    expect(res.status, res.text).toBe(200);
    expect(JSON.parse(res.text)).toHaveLength(1);
  });

  it('returns no replies at once for a signed broadcast without opt.cont', async () => {
    const res = await post(api('broadcast'), wire(newCaller(), { be: '/broadcast/hello', topic: '/dms/hello', ttlMs: 10_000 }));
    expect(res.status).toBe(200);
    expect(JSON.parse(res.text)).toEqual([]);
  });

  it.each([['0'], ['-1'], ['abc'], ['1.5']])('rejects ?limit=%s', async (limit) => {
    const res = await post(`${api('broadcast')}?limit=${limit}`, hello());
    expect(res.status).toBe(400);
    expect(res.json.error).toMatch(/limit must be a positive integer/);
  });

  it('rejects a broadcast with a destination or without a topic', async () => {
    const c = newCaller();
    const withTo = await post(api('broadcast'), wire(c, { to: root(), be: '/broadcast/hello', topic: '/dms/hello', cont: '/x' }));
    expect(withTo.status).toBe(400);
    expect(withTo.json.error).toMatch(/to must be \{\}/);
    const noTopic = await post(api('broadcast'), wire(c, { be: '/broadcast/hello', cont: '/x' }));
    expect(noTopic.status).toBe(400);
    expect(noTopic.json.error).toMatch(/opt.topic is required/);
  });
});

describe('400 for each kind of invalid input', () => {
  const valid = () => JSON.parse(wire(newCaller(), { to: root(), be: '/public/hello', cont: '/private/r' }));
  const raw = (obj: unknown) => JSON.stringify(obj);
  const expect400 = async (body: string, pattern: RegExp, path = 'invoke') => {
    const res = await post(api(path), body);
    expect(res.status, res.text).toBe(400);
    expect(res.json.error).toMatch(pattern);
  };

  it('malformed JSON', () => expect400('{"to":', /malformed JSON/));
  it('empty body', () => expect400('', /malformed JSON/));
  it('not an object', () => expect400('[1,2]', /invalid envelope/));
  it.each(['to', 'be', 'from', 'nonce', 'opt', 'msg'])('missing %s', (field) => {
    const e = valid();
    delete e[field];
    return expect400(raw(e), new RegExp(`^invalid envelope: ${field} is required$`));
  });
  it('missing opt.exp', () => {
    const e = valid();
    delete e.opt.exp;
    return expect400(raw(e), /opt.exp/);
  });
  it('nonce as a string', () => {
    const e = valid();
    e.nonce = '12';
    return expect400(raw(e), /nonce must be an integer/);
  });
  it('nonce as a float, negative, or 2^64', async () => {
    const text = wire(newCaller(), { to: root(), be: '/public/hello', cont: '/r', nonce: 5n });
    for (const bad of ['1.5', '-1', '18446744073709551616', '1e3']) await expect400(text.replace('"nonce":5', `"nonce":${bad}`), /nonce must be an integer/);
  });
  it('exp as a float', () => {
    const text = wire(newCaller(), { to: root(), be: '/public/hello', cont: '/r', exp: 1n });
    return expect400(text.replace('"exp":1', '"exp":1.8e18'), /opt.exp must be an integer/);
  });
  it('be of the wrong type', () => {
    const e = valid();
    e.be = 7;
    return expect400(raw(e), /be/);
  });
  it('bad base64 in msg', () => {
    const e = valid();
    e.msg = 'not base64!';
    return expect400(raw(e), /msg: not valid standard base64/);
  });
  it('signature of the wrong length', () => {
    const e = valid();
    e.sig = 'AAAA';
    return expect400(raw(e), /sig: must be 64 bytes/);
  });
  it('signature that does not verify', () => {
    const e = valid();
    e.be = '/public/status';
    return expect400(raw(e), /signature does not verify/);
  });
  it('a signature anyone can make: the small-order key under which R = identity, S = 0 holds for every message', () => {
    // OpenSSL's Ed25519 check accepts it; the node's (libsodium) refuses small-order keys.
    const e = valid();
    const identityPoint = new Uint8Array(32);
    identityPoint[0] = 1;
    const id = idFromPublicKey(identityPoint);
    e.from = { ...e.from, id, did: `did:key:${id}` };
    const sig = new Uint8Array(64);
    sig[0] = 1;
    e.sig = Buffer.from(sig).toString('base64');
    return expect400(raw(e), /signature does not verify/);
  });
  it('from.did not matching from.id', () => {
    const e = valid();
    e.from.did = 'did:key:z6MkotherXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXX';
    return expect400(raw(e), /from.did does not match from.id/);
  });
  it('expired', () => expect400(wire(newCaller(), { to: root(), be: '/public/hello', cont: '/r', exp: nowNs() - msToNs(1) }), /expired/));
  it('replayed', async () => {
    const text = wire(newCaller(), { to: root(), be: '/public/hello', cont: '/r' });
    expect((await post(api('invoke'), text)).status).toBe(200);
    await expect400(text, /replayed/);
  });
  it('invoke without opt.cont', () => expect400(wire(newCaller(), { to: root(), be: '/public/hello' }), /opt.cont is required/));
  it('invoke to {}', () => expect400(wire(newCaller(), { be: '/public/hello', cont: '/r' }), /needs a destination/));
  it('invoke without a reply inbox', () => {
    const e = valid();
    delete e.from.addr.inbox;
    delete e.sig;
    return expect400(raw(e), /from.addr.inbox is required/);
  });
  it('a reply inbox that is a node actor', async () => {
    const c = newCaller();
    c.inbox = 'root';
    await expect400(wire(c, { to: root(), be: '/public/hello', cont: '/r' }), /is an actor of this node/);
  });
});

describe('limits and transport', () => {
  it('answers 413 over the body limit', async () => {
    const res = await post(api('send'), 'x'.repeat(1_048_577));
    expect(res.status).toBe(413);
    expect(res.json.error).toMatch(/larger than the limit/);
  });

  it('answers 500 naming the peer for a well-formed peer id this node cannot reach', async () => {
    const host = '12D3KooWQK1wnefoLrcVHbbnf5tLzbopUd3K3bFAoJpA7YJgL5pV';
    const res = await post(api('send'), wire(newCaller(), { to: rootOf(host), be: '/public/hello' }));
    expect(res.status).toBe(500);
    expect(res.json.error).toMatch(new RegExp(`cannot reach (host|peer) ${host}`));
  });

  it('answers 400 for a destination host that is not a peer id', async () => {
    const res = await post(api('send'), wire(newCaller(), { to: rootOf('not-a-peer'), be: '/public/hello' }));
    expect(res.status).toBe(400);
    expect(res.json.error).toMatch(/to.addr.host 'not-a-peer' is not a peer id/);
  });
});

describe('CORS', () => {
  it('answers a preflight from a configured origin (rest.cors.origins), allowing the credential headers', async () => {
    const res = await fetch(api('invoke'), {
      method: 'OPTIONS',
      headers: { origin: 'http://localhost:9991', 'access-control-request-method': 'POST' },
    });
    expect(res.status).toBe(204);
    expect(res.headers.get('access-control-allow-origin')).toBe('http://localhost:9991');
    expect(res.headers.get('access-control-allow-methods')).toBe('GET,POST,PUT,PATCH,DELETE,HEAD,OPTIONS');
    expect(res.headers.get('access-control-allow-headers')).toBe('Access-Control-Allow-Origin,Origin,Content-Length,Content-Type,X-API-Key,Authorization');
    expect(res.headers.get('access-control-max-age')).toBe('43200');
    expect(res.headers.get('access-control-allow-credentials')).toBeNull();
  });

  it('does not allow other origins', async () => {
    for (const origin of ['http://evil.example', 'http://localhost:9993']) {
      const res = await fetch(api('invoke'), { method: 'OPTIONS', headers: { origin, 'access-control-request-method': 'POST' } });
      expect(res.status, origin).toBe(403);
      expect(res.headers.get('access-control-allow-origin')).toBeNull();
    }
    const ok = await fetch(api('invoke'), { method: 'OPTIONS', headers: { origin: 'http://localhost:9992', 'access-control-request-method': 'POST' } });
    expect(ok.headers.get('access-control-allow-origin')).toBe('http://localhost:9992');
  });
});
