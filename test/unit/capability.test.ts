import { describe, expect, it, vi } from 'vitest';
import {
  type Anchors,
  Authority,
  checkChain,
  covers,
  decodeTokenList,
  delegationProblem,
  encodeTokenJson,
  encodeTokenList,
  implies,
  issueRevocation,
  issueToken,
  type IssueOptions,
  parsePath,
  type Token,
  tokenFromJson,
  tokenFromText,
  tokenId,
  tokenToText,
} from '../../runtime/capability/index.js';
import { KeyPair } from '../../runtime/crypto/keys.js';
import { DmsError } from '../../runtime/errors.js';
import { msToNs, nowNs } from '../../runtime/time.js';
import { emptyHandle, type Envelope, parseJsonLossless, U64_MAX } from '../../runtime/wire/envelope.js';
import { verifications } from '../helpers/verifications.js';

// A cache hit is told from a verification by counting them (test/helpers/verifications.ts).
vi.mock('../../runtime/crypto/keys.js', async (original) => (await import('../helpers/verifications.js')).countingVerifications(await original()));

const root = KeyPair.generate();
const alice = KeyPair.generate();
const bob = KeyPair.generate();
const carol = KeyPair.generate();

const HOUR = msToNs(3_600_000);
const START = nowNs();
/** Fixed expiries, so a chain built link by link narrows exactly as written. */
const later = (n = 1) => START + HOUR * BigInt(n);

const grant = (by: KeyPair, to: KeyPair, o: Partial<IssueOptions> = {}): Token =>
  issueToken(by, { act: 'invoke', aud: to.did, cap: ['/dms/job'], exp: later(), ...o });

const anchors = (a: Partial<Anchors> = {}): Anchors => ({ root: [root.did], require: [], provide: [], revoke: [], ...a });
const trustOf = (a: Partial<Anchors> = {}) => new Authority(anchors(a));

function envFrom(key: KeyPair, be: string, cap?: Token[], topic?: string): Envelope {
  const env: Envelope = {
    to: topic ? emptyHandle() : { id: '', did: '', addr: { host: '', inbox: 'root' } },
    be,
    from: { id: key.id, did: key.did, addr: { host: '', inbox: 'user-x' } },
    nonce: 1n,
    opt: { exp: later() },
    msg: new Uint8Array(),
  };
  if (topic) env.opt.topic = topic;
  if (cap) env.cap = encodeTokenList(cap);
  return env;
}

const denial = (fn: () => void): string => {
  try {
    fn();
  } catch (e) {
    expect(e).toBeInstanceOf(DmsError);
    expect((e as DmsError).kind).toBe('forbidden');
    return (e as DmsError).message;
  }
  throw new Error('expected a forbidden error');
};

/** Re-reads a token from JSON text after `edit`, keeping the original signature. */
function tamper(t: Token, edit: (json: string) => string): Token {
  return tokenFromJson(parseJsonLossless(edit(encodeTokenJson(t))));
}

describe('capability paths', () => {
  it('imply whole segments below them, and / implies everything', () => {
    expect(implies('/dms/job', '/dms/job')).toBe(true);
    expect(implies('/dms/job', '/dms/job/submit')).toBe(true);
    expect(implies('/dms/job', '/dms/jobs')).toBe(false);
    expect(implies('/dms/job/submit', '/dms/job')).toBe(false);
    expect(implies('/', '/anything/at/all')).toBe(true);
    expect(covers(['/dms'], ['/dms/job', '/dms/node/peers'])).toBe(true);
    expect(covers(['/dms/job'], ['/dms/job', '/dms/node'])).toBe(false);
  });

  it('refuse malformed paths', () => {
    expect(parsePath('/dms/job/')).toBe('/dms/job');
    for (const bad of ['dms/job', '/dms//job', '/dms job', '', '/x'.repeat(200)]) expect(() => parsePath(bad)).toThrow(/is not a path/);
  });
});

describe('token format', () => {
  it('round-trips through the envelope list and the text form, keeping exp exact', () => {
    const t = grant(root, alice, { exp: U64_MAX - 1n, topic: ['/dms/hello'] });
    const [back] = decodeTokenList(encodeTokenList([t]));
    expect(back.exp).toBe(U64_MAX - 1n);
    expect(encodeTokenJson(back)).toBe(encodeTokenJson(t));
    expect(encodeTokenJson(back)).toContain(`"exp":${U64_MAX - 1n},`);
    expect(tokenId(tokenFromText(tokenToText(t)))).toBe(tokenId(t));
    expect(tokenId(tokenFromText(encodeTokenJson(t)))).toBe(tokenId(t));
  });

  it('says a word that is base64url but no token is not a token, not what the JSON parser saw', () => {
    // `dms cap revoke junk` printed "malformed JSON: JSON value expected but got '\ufffd'".
    expect(() => tokenFromText('junk', 'token')).toThrow("token: not a token (its text does not decode to a token's JSON)");
    expect(() => tokenFromText('not a token!', 'token')).toThrow('token: not a token (expected base64url text or JSON)');
  });

  it('refuses malformed lists and tokens with a reason', () => {
    const t = grant(root, alice);
    const bytes = (s: string) => new TextEncoder().encode(s);
    expect(() => decodeTokenList(bytes('{}'))).toThrow(/JSON array/);
    expect(() => decodeTokenList(bytes('[1]'))).toThrow(/cap\[0\] must be a JSON object/);
    expect(() => decodeTokenList(bytes(`[${encodeTokenJson(t).replace('"exp":', '"exp":1.5,"x":')}]`))).toThrow();
    expect(() => tamper(t, (j) => j.replace(/"exp":\d+/, '"exp":"12"'))).toThrow(/exp must be an integer/);
    expect(() => tamper(t, (j) => j.replace('"act":"invoke"', '"act":"own"'))).toThrow(/act must be/);
    expect(() => tamper(t, (j) => j.replace('"cap":["/dms/job"]', '"cap":["dms"]'))).toThrow(/cap must be/);
    expect(() => decodeTokenList(bytes(`[${Array(17).fill(encodeTokenJson(t)).join(',')}]`))).toThrow(/at most 16 tokens/);
  });
});

describe('token chains', () => {
  it('accepts a token issued by a root', () => {
    const r = checkChain(grant(root, alice), trustOf());
    expect(r.ok).toBe(true);
    if (r.ok) expect(r.grant).toMatchObject({ aud: alice.did, act: 'invoke', cap: ['/dms/job'], root: root.did });
  });

  it('accepts a valid delegation chain that narrows at every link', () => {
    const a = grant(root, alice, { act: 'delegate', cap: ['/dms'], depth: 2, exp: later(3) });
    const b = grant(alice, bob, { act: 'delegate', cap: ['/dms/job'], depth: 1, exp: later(2), chain: a });
    const c = grant(bob, carol, { cap: ['/dms/job/submit'], exp: later(1), chain: b });
    const r = checkChain(c, trustOf());
    expect(r.ok, r.ok ? '' : r.reason).toBe(true);
    if (r.ok) {
      expect(r.grant.aud).toBe(carol.did);
      expect(r.grant.exp).toBe(c.exp);
    }
    const auth = trustOf();
    expect(() => auth.check(envFrom(carol, '/dms/job/submit', [c]), { name: '/dms/job/submit' })).not.toThrow();
    expect(denial(() => auth.check(envFrom(carol, '/dms/job/cancel', [c]), { name: '/dms/job/cancel' }))).toMatch(/capability \/dms\/job\/cancel not granted/);
  });

  it('refuses an over-broad link', () => {
    const a = grant(root, alice, { act: 'delegate', cap: ['/dms/job'], depth: 1 });
    const wide = grant(alice, bob, { cap: ['/dms'], chain: a });
    expect(checkChain(wide, trustOf())).toEqual({ ok: false, reason: expect.stringMatching(/link 2 of 2: capabilities \/dms are broader/) });
    const topics = grant(alice, bob, { act: 'broadcast', cap: [], topic: ['/dms/other'], chain: a });
    expect(checkChain(topics, trustOf())).toMatchObject({ ok: false, reason: expect.stringMatching(/topics \/dms\/other are broader/) });
    expect(delegationProblem(a, grant(alice, bob, { exp: a.exp + 1n, chain: a }))).toMatch(/expires after the link above/);
  });

  it('refuses a chain with an expired link', () => {
    const past = nowNs() - HOUR;
    const a = grant(root, alice, { act: 'delegate', cap: ['/dms'], depth: 1, exp: past });
    const b = grant(alice, bob, { exp: past - 1n, chain: a });
    const auth = trustOf();
    expect(checkChain(b, auth).ok).toBe(true); // verification itself is timeless: the cache can hold it
    expect(denial(() => auth.check(envFrom(bob, '/dms/job', [b]), { name: '/dms/job' }))).toMatch(/expired link/);
    // A child that outlives its expired parent is over-broad in expiry.
    const outliving = grant(alice, bob, { exp: later(), chain: a });
    expect(checkChain(outliving, auth)).toMatchObject({ ok: false, reason: expect.stringMatching(/link 2 of 2: expires after/) });
  });

  it('refuses a wrong issuer: not rooted here, or not the audience of the link above', () => {
    expect(checkChain(grant(alice, bob), trustOf())).toMatchObject({ ok: false, reason: expect.stringMatching(/issuer did:key:\S+ is not trusted by this node \(wrong issuer\)/) });
    const a = grant(root, alice, { act: 'delegate', cap: ['/dms'], depth: 1 });
    const byBob = grant(bob, carol, { chain: a });
    expect(checkChain(byBob, trustOf())).toMatchObject({ ok: false, reason: expect.stringMatching(/link 2 of 2: issued by .* but the link above grants .*wrong issuer/) });
  });

  it('refuses a chain deeper than its root allows', () => {
    const a = grant(root, alice, { act: 'delegate', cap: ['/dms'], depth: 1 });
    const b = grant(alice, bob, { act: 'delegate', cap: ['/dms'], depth: 0, chain: a });
    const c = grant(bob, carol, { chain: b });
    expect(checkChain(c, trustOf())).toMatchObject({ ok: false, reason: expect.stringMatching(/link 3 of 3: delegation depth exceeded/) });
    const deep = grant(alice, bob, { act: 'delegate', cap: ['/dms'], depth: 1, chain: a });
    expect(checkChain(deep, trustOf())).toMatchObject({ ok: false, reason: expect.stringMatching(/depth 1 exceeds/) });
    const fromInvoke = grant(alice, bob, { chain: grant(root, alice) });
    expect(checkChain(fromInvoke, trustOf())).toMatchObject({ ok: false, reason: expect.stringMatching(/invoke token, which cannot be delegated/) });
  });

  it('refuses a revoked link, when a root or an issuer at or above it revoked it', () => {
    const a = grant(root, alice, { act: 'delegate', cap: ['/dms'], depth: 1 });
    const b = grant(alice, bob, { chain: a });
    expect(checkChain(b, trustOf({ revoke: [issueRevocation(root, tokenId(a))] }))).toMatchObject({ ok: false, reason: expect.stringMatching(/link 1 of 2: revoked by/) });
    expect(checkChain(b, trustOf({ revoke: [issueRevocation(alice, tokenId(b))] }))).toMatchObject({ ok: false, reason: expect.stringMatching(/link 2 of 2: revoked/) });
    // Bob cannot revoke the grant made to Alice, and a forged revocation counts for nothing.
    expect(checkChain(b, trustOf({ revoke: [issueRevocation(bob, tokenId(a))] })).ok).toBe(true);
    const forged = tamper(issueRevocation(root, tokenId(b)), (j) => j.replace(/"rev":"[0-9a-f]+"/, `"rev":"${tokenId(a)}"`));
    expect(checkChain(b, trustOf({ revoke: [forged] })).ok).toBe(true);
  });

  it('refuses a tampered token or link', () => {
    const a = grant(root, alice, { act: 'delegate', cap: ['/dms/job'], depth: 1 });
    const b = grant(alice, bob, { cap: ['/dms/job'], chain: a });
    // Widened past its parent, the link is refused for that, without checking any signature.
    const widened = tamper(b, (j) => j.replace('"cap":["/dms/job"],"exp"', '"cap":["/"],"exp"'));
    expect(checkChain(widened, trustOf())).toMatchObject({ ok: false, reason: expect.stringMatching(/link 2 of 2: capabilities \/ are broader/) });
    // Changed within what its parent allows, only its signature gives it away.
    const narrowed = tamper(b, (j) => j.replace('"cap":["/dms/job"],"exp"', '"cap":["/dms/job/submit"],"exp"'));
    expect(checkChain(narrowed, trustOf())).toMatchObject({ ok: false, reason: expect.stringMatching(/link 2 of 2: signature does not verify/) });
    // Widen the root grant and the child alike: now the root link's signature fails.
    const both = tamper(b, (j) => j.replaceAll('"cap":["/dms/job"]', '"cap":["/"]'));
    expect(checkChain(both, trustOf())).toMatchObject({ ok: false, reason: expect.stringMatching(/link 1 of 2: signature does not verify/) });
    const stolen = tamper(b, (j) => j.replace(`"aud":"${bob.did}"`, `"aud":"${carol.did}"`));
    expect(checkChain(stolen, trustOf()).ok).toBe(false);
  });
});

describe('Authority', () => {
  it('trusts roots and the node itself, opens /public, and names the missing capability', () => {
    const node = KeyPair.generate();
    const auth = new Authority(anchors(), undefined, (id) => id === node.id);
    expect(() => auth.check(envFrom(root, '/dms/node/peers/list'), { name: '/dms/node/peers/list' })).not.toThrow();
    expect(() => auth.check(envFrom(node, '/dms/node/peers/list'), { name: '/dms/node/peers/list' })).not.toThrow();
    expect(() => auth.check(envFrom(alice, '/public/hello'), { name: '/public/hello' })).not.toThrow();
    expect(() => auth.check(envFrom(alice, '/private/reply/1'), { name: '/private/reply/1', capability: '' })).not.toThrow();
    expect(denial(() => auth.check(envFrom(alice, '/dms/node/peers/list'), { name: '/dms/node/peers/list' }))).toBe(
      `capability /dms/node/peers/list not granted to ${alice.did}`,
    );
    expect(denial(() => auth.check(envFrom(alice, '/x'), { name: '/x', capability: '/dms/custom' }))).toMatch(/capability \/dms\/custom not granted/);
  });

  it('honours require anchors without the caller attaching anything, and the audience must match', () => {
    const auth = trustOf({ require: [grant(root, alice, { cap: ['/dms/node'] })] });
    expect(() => auth.check(envFrom(alice, '/dms/node/peers/list'), { name: '/dms/node/peers/list' })).not.toThrow();
    expect(denial(() => auth.check(envFrom(bob, '/dms/node/peers/list', [grant(root, alice, { cap: ['/'] })]), { name: '/dms/node/peers/list' }))).toMatch(/not the sender/);
  });

  it('lets anyone broadcast on open topics, and needs a broadcast grant elsewhere', () => {
    const auth = trustOf();
    const hello = { name: '/broadcast/hello' };
    expect(() => auth.check(envFrom(alice, hello.name, undefined, '/dms/hello'), hello)).not.toThrow();
    expect(denial(() => auth.check(envFrom(alice, hello.name, undefined, '/dms/private'), hello))).toMatch(/broadcast on topic \/dms\/private not granted/);
    const b = grant(root, alice, { act: 'broadcast', cap: [], topic: ['/dms/private'] });
    expect(() => auth.check(envFrom(alice, hello.name, [b], '/dms/private'), hello)).not.toThrow();
    // An invoke grant is not a broadcast grant, and a broadcast grant does not invoke directly.
    expect(() => auth.check(envFrom(alice, hello.name, [grant(root, alice, { cap: ['/'] })], '/dms/private'), hello)).toThrow();
    expect(() => auth.check(envFrom(alice, '/dms/job', [grant(root, alice, { act: 'broadcast', cap: ['/dms/job'], topic: ['/t'] })]), { name: '/dms/job' })).toThrow();
    // A non-broadcast behavior reached by broadcast needs its capability too, even on an open topic.
    expect(denial(() => auth.check(envFrom(alice, '/dms/job', undefined, '/dms/hello'), { name: '/dms/job' }))).toMatch(/capability \/dms\/job/);
  });

  it('honours a revocation anchored after the fact, dropping cached verdicts', () => {
    const t = grant(root, alice);
    const auth = trustOf();
    const env = envFrom(alice, '/dms/job', [t]);
    auth.check(env, { name: '/dms/job' });
    auth.load(anchors({ revoke: [issueRevocation(root, tokenId(t))] }));
    expect(denial(() => auth.check(env, { name: '/dms/job' }))).toMatch(/revoked/);
  });

  it('verifies a repeated chain once: later checks are cache hits', () => {
    const chain = grant(alice, bob, { chain: grant(root, alice, { act: 'delegate', cap: ['/dms'], depth: 1 }) });
    const auth = trustOf();
    const first = auth.cache.check(encodeTokenList([chain]));
    const again = auth.cache.check(encodeTokenList([chain]));
    expect(again).toBe(first);
    expect(auth.cache.size).toBe(1);
    // Counted, not timed: 2000 checks of the envelope carrying it verify no signature, where
    // checking the chain afresh verifies its two.
    const env = envFrom(bob, '/dms/job', [chain]);
    const before = verifications();
    for (let i = 0; i < 2000; i++) auth.check(env, { name: '/dms/job' });
    expect(verifications()).toBe(before);
    checkChain(chain, auth);
    expect(verifications()).toBe(before + 2);
  });

  it('selects provide tokens by audience, behavior and expiry', () => {
    const fit = grant(root, alice, { cap: ['/dms/job'] });
    const other = grant(root, bob, { cap: ['/dms/job'] });
    const expired = grant(root, alice, { cap: ['/dms/job'], exp: nowNs() - 1n });
    const topic = grant(root, alice, { act: 'broadcast', cap: [], topic: ['/t'] });
    const auth = trustOf({ provide: [fit, other, expired, topic] });
    expect(decodeTokenList(auth.provideFor(alice.did, '/dms/job/submit')!).map(tokenId)).toEqual([tokenId(fit)]);
    expect(decodeTokenList(auth.provideFor(alice.did, '/broadcast/hello', '/t')!).map(tokenId)).toEqual([tokenId(topic)]);
    expect(auth.provideFor(alice.did, '/dms/node')).toBeUndefined();
    expect(auth.provideFor(carol.did, '/dms/job')).toBeUndefined();
  });
});
