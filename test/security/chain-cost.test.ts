import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, beforeEach, describe, expect, it, vi } from 'vitest';
import { type Anchors, Authority, ChainCache, encodeTokenList, issueToken, type IssueOptions, LIMITS, type Token } from '../../runtime/capability/index.js';
import { KeyPair, verifySync } from '../../runtime/crypto/keys.js';
import { signEnvelopeSync } from '../../runtime/crypto/signing.js';
import { msToNs, nextNonce, nowNs } from '../../runtime/time.js';
import { encodeEnvelope, encodePayload, type Envelope } from '../../runtime/wire/envelope.js';
import { post, rootOf } from '../helpers/envelopes.js';
import { type NodeProcess, removeHome, startNode } from '../helpers/node.js';

/**
 * What a capability list costs a node in Ed25519 verifications. Every token signature check
 * goes through `verifySync` of runtime/crypto/keys.ts, so counting its calls counts them all.
 */
vi.mock('../../runtime/crypto/keys.js', async (importOriginal) => {
  const original = await importOriginal<typeof import('../../runtime/crypto/keys.js')>();
  return { ...original, verifySync: vi.fn(original.verifySync) };
});
const verifications = () => vi.mocked(verifySync).mock.calls.length;

const root = KeyPair.generate();
const alice = KeyPair.generate();
const bob = KeyPair.generate();
const later = (hours = 1) => nowNs() + msToNs(3_600_000 * hours);
const anchors = (a: Partial<Anchors> = {}): Anchors => ({ root: [root.did], require: [], provide: [], revoke: [], ...a });
const grant = (by: KeyPair, to: KeyPair, o: Partial<IssueOptions> = {}): Token =>
  issueToken(by, { act: 'invoke', aud: to.did, cap: ['/dms/job'], exp: later(), ...o });

/**
 * A chain of `links` well-formed delegations, every link validly signed by its issuer: only
 * the first link's issuer decides whether it is worth anything here. `sign: false` leaves
 * 64 random bytes as each signature instead.
 */
function junkChain(links: number, first: KeyPair, sign = true): Token {
  const keys = Array.from({ length: links + 1 }, (_, i) => (i === 0 ? first : KeyPair.generate()));
  let t: Token | undefined;
  for (let i = 0; i < links; i++) {
    const last = i === links - 1;
    const o: IssueOptions = { act: last ? 'invoke' : 'delegate', aud: keys[i + 1].did, cap: ['/'], exp: 1n << 62n, depth: last ? 0 : links - 1 - i, ...(t ? { chain: t } : {}) };
    t = sign ? issueToken(keys[i], o) : { ...issueToken(keys[i], o), sig: randomBytes(64) };
  }
  return t!;
}

const shuffled = <T>(xs: readonly T[]): T[] => {
  const out = [...xs];
  for (let i = out.length - 1; i > 0; i--) {
    const j = Math.floor(Math.random() * (i + 1));
    [out[i], out[j]] = [out[j], out[i]];
  }
  return out;
};

/** As many junk chains of as many links as fit the 64 KiB `cap` limit (16 × 16 does not). */
function junkList(first: () => KeyPair, sign = true): { list: Token[]; bytes: Uint8Array; tokens: number; links: number } {
  for (let links = LIMITS.chainLinks; links > 0; links--) {
    const list = Array.from({ length: LIMITS.listTokens }, () => junkChain(links, first(), sign));
    const bytes = encodeTokenList(list);
    if (bytes.length <= LIMITS.listBytes) return { list, bytes, tokens: LIMITS.listTokens, links };
  }
  throw new Error('no junk list fits');
}

describe('chain verification cost', () => {
  let cache: ChainCache;
  beforeEach(() => {
    cache = new Authority(anchors()).cache;
    vi.mocked(verifySync).mockClear();
  });

  it('a full list of validly signed chains from an untrusted root costs no signature verification, in any order', () => {
    const junk = junkList(() => KeyPair.generate());
    expect(junk.tokens * junk.links).toBeGreaterThan(150);
    for (const order of [junk.list, [...junk.list].reverse(), shuffled(junk.list)]) {
      const r = cache.check(encodeTokenList(order));
      expect(r.grants).toEqual([]);
      expect(r.problems).toHaveLength(junk.tokens);
      for (const p of r.problems) expect(p).toMatch(/^cap\[\d+\]: link 1 of \d+: issuer did:key:\S+ is not trusted by this node \(wrong issuer\)$/);
    }
    expect(verifications()).toBe(0);
  });

  it('forged chains claiming a trusted root cost at most one verification per token, and nothing when seen again', () => {
    const junk = junkList(() => root, false);
    const r = cache.check(junk.bytes);
    expect(r.grants).toEqual([]);
    for (const p of r.problems) expect(p).toMatch(/link 1 of \d+: signature does not verify/);
    expect(verifications()).toBeLessThanOrEqual(junk.tokens);
    const spent = verifications();
    cache.check(encodeTokenList(shuffled(junk.list)));
    expect(verifications()).toBe(spent);
  });

  it('checks each token once: the same tokens in any order or combination cost no new verification', () => {
    const a = grant(root, alice, { act: 'delegate', cap: ['/dms'], depth: 2, exp: later(2) });
    const tokens = [
      grant(alice, bob, { chain: a }),
      grant(alice, bob, { cap: ['/dms/node'], chain: a }),
      grant(root, bob),
      grant(root, alice, { cap: ['/dms/node'] }),
    ];
    const first = cache.check(encodeTokenList(tokens));
    expect(first.problems).toEqual([]);
    expect(first.grants).toHaveLength(4);
    const spent = verifications();
    // 3 tokens' own signatures plus the shared root link `a`, at most once each.
    expect(spent).toBeLessThanOrEqual(5);

    const reordered = cache.check(encodeTokenList([tokens[3], tokens[1], tokens[0], tokens[2]]));
    expect(reordered.grants.map((g) => g.id)).toEqual([3, 1, 0, 2].map((i) => first.grants[i].id));
    cache.check(encodeTokenList([tokens[2], tokens[0]]));
    cache.check(encodeTokenList([tokens[1], tokens[1], tokens[3]]));
    expect(verifications()).toBe(spent);

    // A new leaf below a known link pays for its own signature only.
    const leaf = grant(alice, bob, { cap: ['/dms/job/submit'], chain: a });
    expect(cache.check(encodeTokenList([leaf, tokens[0]])).grants).toHaveLength(2);
    expect(verifications()).toBe(spent + 1);
  });
});

describe('a node sent junk chains', () => {
  let node: NodeProcess;
  beforeAll(async () => {
    node = await startNode({ config: { network: { enabled: false } } });
  });
  afterAll(async () => {
    await node?.stop();
    if (node) removeHome(node.home);
  });

  const invoke = (stranger: KeyPair, be: string, cap?: Uint8Array): string => {
    const env: Envelope = {
      to: rootOf(node.peerId),
      be,
      from: { id: stranger.id, did: stranger.did, addr: { host: '', inbox: 'user-junk' } },
      nonce: nextNonce(),
      opt: { exp: nowNs() + msToNs(30_000), cont: '/private/r' },
      msg: encodePayload({}),
      ...(cap ? { cap } : {}),
    };
    return encodeEnvelope(signEnvelopeSync(env, stranger));
  };

  it('refuses full lists of untrusted chains with 403 at once, and stays healthy', { timeout: 120_000 }, async () => {
    const stranger = KeyPair.generate();
    // One list of validly signed chains from nobody this node trusts, sent in ever new orders:
    // a cache of whole lists never hits, so only the order of the checks can help.
    const junk = junkList(() => KeyPair.generate());
    const bodies = Array.from({ length: 150 }, () => invoke(stranger, '/dms/node/peers/list', encodeTokenList(shuffled(junk.list))));
    const answers = await Promise.all(bodies.map((b) => post(`${node.url}/api/v1/actor/invoke`, b)));
    for (const a of answers) {
      expect(a.status, a.text).toBe(403);
      expect(a.json.error).toMatch(/^capability \/dms\/node\/peers\/list not granted to did:key:\S+ \(cap\[0\]: link 1 of \d+: issuer did:key:\S+ is not trusted by this node \(wrong issuer\)/);
    }
    // ~26,000 links in all. That refusing them costs no signature verification, in any order,
    // is counted above ('chain verification cost'); how long the node takes is a speed claim,
    // not timed here, where the machine's load decides it.
    expect((await fetch(`${node.url}/health`)).status).toBe(200);
    const hello = await post(`${node.url}/api/v1/actor/invoke`, invoke(stranger, '/public/hello'));
    expect(hello.status, hello.text).toBe(200);
  });
});
