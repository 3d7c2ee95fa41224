import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, beforeEach, describe, expect, it, vi } from 'vitest';
import { type Anchors, Authority, ChainCache, encodeTokenList, issueToken, type IssueOptions, LIMITS, type Token } from '../../runtime/capability/index.js';
import { KeyPair, verifySync } from '../../runtime/crypto/keys.js';
import { msToNs, nextNonce, nowNs } from '../../runtime/time.js';
import { decodePayload, encodeEnvelope, encodePayload, type Envelope } from '../../runtime/wire/envelope.js';
import { post, rootOf, signEnvelopeSync } from '../helpers/envelopes.js';
import { type LocalNode, startLocalNode } from '../helpers/local-node.js';
import { removeHome } from '../helpers/node.js';
import { ForeignPeer } from '../helpers/peer.js';
import { verifications } from '../helpers/verifications.js';

/** What a capability list costs a node in Ed25519 verifications, counted (test/helpers/verifications.ts). */
vi.mock('../../runtime/crypto/keys.js', async (original) => (await import('../helpers/verifications.js')).countingVerifications(await original()));

const root = KeyPair.generate();
const alice = KeyPair.generate();
const bob = KeyPair.generate();
const carol = KeyPair.generate();
const later = (hours = 1) => nowNs() + msToNs(3_600_000 * hours);
const anchors = (a: Partial<Anchors> = {}): Anchors => ({ root: [root.did], require: [], provide: [], revoke: [], ...a });
const grant = (by: KeyPair, to: KeyPair, o: Partial<IssueOptions> = {}): Token =>
  issueToken(by, { act: 'invoke', aud: to.did, cap: ['/dms/job'], exp: later(), ...o });

/** A genuine chain down `keys`: each delegates to the next, one link fewer each time; the last link is an invoke. */
function chainOf(keys: KeyPair[]): Token {
  let t: Token | undefined;
  const exp = later();
  for (let i = 0; i < keys.length - 1; i++) {
    const last = i === keys.length - 2;
    t = issueToken(keys[i], { act: last ? 'invoke' : 'delegate', aud: keys[i + 1].did, cap: ['/dms/job'], exp, depth: last ? 0 : keys.length - 2 - i, ...(t ? { chain: t } : {}) });
  }
  return t!;
}

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

  it('a forged 16-link chain under a known root is refused with at most one signature check', () => {
    // Raised to the parse limit, so that only the signature order decides the cost.
    const deep = new Authority(anchors(), undefined, undefined, { maxChainLinks: LIMITS.chainLinks }).cache;
    const r = deep.check(encodeTokenList([junkChain(LIMITS.chainLinks, root, false)]));
    expect(r.grants).toEqual([]);
    expect(r.problems).toEqual([expect.stringMatching(/^cap\[0\]: link 1 of 16: signature does not verify/)]);
    expect(verifications()).toBeLessThanOrEqual(1);
  });

  it('a full list of forged chains under a known root costs one signature check in all, and nothing when seen again', () => {
    const deep = new Authority(anchors(), undefined, undefined, { maxChainLinks: LIMITS.chainLinks }).cache;
    const junk = junkList(() => root, false);
    const r = deep.check(junk.bytes);
    expect(r.grants).toEqual([]);
    expect(r.problems[0]).toMatch(/^cap\[0\]: link 1 of \d+: signature does not verify/);
    for (const p of r.problems.slice(1)) expect(p).toMatch(/^cap\[\d+\]: not checked: an earlier token of this list has a signature that does not verify$/);
    expect(verifications()).toBe(1);
    deep.check(junk.bytes);
    expect(verifications()).toBe(1);
    // Another order is another list: its first unseen forgery costs one more, nothing else.
    deep.check(encodeTokenList(shuffled(junk.list)));
    expect(verifications()).toBeLessThanOrEqual(2);
  });

  it('a chain longer than capabilities.max_chain_links (default 4) is refused with no signature check', () => {
    const genuine = chainOf([root, alice, bob, KeyPair.generate(), KeyPair.generate(), KeyPair.generate()]);
    const r = cache.check(encodeTokenList([genuine]));
    expect(r.problems).toEqual([`cap[0]: a chain of 5 links is longer than this node accepts (at most 4: capabilities.max_chain_links)`]);
    expect(verifications()).toBe(0);
    // Four links are fine.
    const four = chainOf([root, alice, bob, KeyPair.generate(), KeyPair.generate()]);
    expect(cache.check(encodeTokenList([four])).problems).toEqual([]);
  });

  it('a chain whose links do not connect, widen, or outlive their parent is refused with no signature check', () => {
    const forge = (t: Token): Token => ({ ...t, sig: randomBytes(64) });
    const a = forge(grant(root, alice, { act: 'delegate', cap: ['/dms/job'], depth: 2 }));
    const cases: [Token, RegExp][] = [
      [forge(grant(bob, carol, { chain: a })), /link 2 of 2: issued by \S+, but the link above grants \S+ \(wrong issuer\)/],
      [forge(grant(alice, bob, { cap: ['/dms'], chain: a })), /link 2 of 2: capabilities \/dms are broader/],
      [forge(grant(alice, bob, { exp: a.exp + 1n, chain: a })), /link 2 of 2: expires after the link above/],
      [forge(grant(alice, bob, { act: 'delegate', depth: 5, chain: a })), /link 2 of 2: depth 5 exceeds/],
    ];
    for (const [t, why] of cases) expect(cache.check(encodeTokenList([t])).problems).toEqual([expect.stringMatching(why)]);
    expect(verifications()).toBe(0);
  });

  it('an expired chain is refused with no signature check', () => {
    const past = nowNs() - 1n;
    const a = grant(root, alice, { act: 'delegate', cap: ['/dms'], depth: 1, exp: past });
    const r = cache.check(encodeTokenList([grant(alice, bob, { exp: past, chain: a }), grant(root, bob, { exp: past })]));
    expect(r.problems).toEqual(['cap[0]: link 1 of 2 expired (expired link)', 'cap[1]: token expired']);
    expect(verifications()).toBe(0);
  });

  it('a genuine chain verifies each link once, then hits the cache', () => {
    const genuine = chainOf([root, alice, bob, carol]);
    expect(cache.check(encodeTokenList([genuine])).grants).toHaveLength(1);
    expect(verifications()).toBe(3);
    // Another list holding it (its bytes differ) finds the chain's verdict by the token's hash.
    const other = cache.check(encodeTokenList([grant(root, carol), genuine]));
    expect(other.grants).toHaveLength(2);
    expect(verifications()).toBe(4);
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

describe('a per-peer budget of signatures that fail', () => {
  const job = { name: '/dms/job' };
  let clock = 0;
  const budgeted = () => new Authority(anchors(), undefined, undefined, { peerBadSignaturesPerS: 3, peerRefuseS: 60, clock: () => clock });
  const envOf = (key: KeyPair, cap: Token[]): Envelope => ({
    to: { id: '', did: '', addr: { host: '', inbox: 'root' } },
    be: job.name,
    from: { id: key.id, did: key.did, addr: { host: 'peer', inbox: 'user-x' } },
    nonce: nextNonce(),
    opt: { exp: later() },
    msg: new Uint8Array(),
    cap: encodeTokenList(cap),
  });
  const forged = (to: KeyPair): Token => ({ ...grant(root, to), sig: randomBytes(64) });
  const refusal = (fn: () => void): string => {
    try {
      fn();
    } catch (e) {
      return (e as Error).message;
    }
    throw new Error('expected a refusal');
  };
  beforeEach(() => {
    clock = 1_000_000;
    vi.mocked(verifySync).mockClear();
  });

  it('refuses a peer past it for a while without checking anything, and no other peer', () => {
    const auth = budgeted();
    const mallory = KeyPair.generate();
    // Three a second are allowed; the fourth failure within the second cuts the peer off.
    for (let i = 0; i < 4; i++) expect(refusal(() => auth.check(envOf(mallory, [forged(mallory)]), job, 'peer-m'))).toMatch(/cap\[0\]: token: signature does not verify/);
    expect(verifications()).toBe(4);
    const cutOff = refusal(() => auth.check(envOf(mallory, [forged(mallory)]), job, 'peer-m'));
    expect(cutOff).toBe(
      'peer peer-m is refused for 60 s: it sent capability tokens whose signatures do not verify, more than 3 a second (capabilities.peer_bad_signatures_per_s)',
    );
    // Even a genuine token does not help it now, and costs nothing.
    expect(refusal(() => auth.check(envOf(mallory, [grant(root, mallory)]), job, 'peer-m'))).toBe(cutOff);
    expect(verifications()).toBe(4);
    // Another peer, and the same key through another peer, still get through.
    expect(() => auth.check(envOf(alice, [grant(root, alice)]), job, 'peer-a')).not.toThrow();
    expect(() => auth.check(envOf(mallory, [grant(root, mallory)]), job, 'peer-b')).not.toThrow();
    // After the refusal ends the peer is judged afresh.
    clock += 60_001;
    expect(() => auth.check(envOf(mallory, [grant(root, mallory)]), job, 'peer-m')).not.toThrow();
  });

  it('refills a second at a time: a peer failing now and then is never cut off', () => {
    const auth = budgeted();
    const mallory = KeyPair.generate();
    for (let i = 0; i < 20; i++) {
      expect(refusal(() => auth.check(envOf(mallory, [forged(mallory)]), job, 'peer-m'))).toMatch(/signature does not verify/);
      clock += 400;
    }
  });

  it('counts only signatures actually checked: a known forged list costs nothing and uses none of the budget', () => {
    const auth = budgeted();
    const mallory = KeyPair.generate();
    const same = [forged(mallory)];
    for (let i = 0; i < 20; i++) expect(refusal(() => auth.check(envOf(mallory, same), job, 'peer-m'))).toMatch(/signature does not verify/);
    expect(verifications()).toBe(1);
  });

  it('keys callers without a network peer (REST, local) by their signing key', () => {
    const auth = budgeted();
    const mallory = KeyPair.generate();
    for (let i = 0; i < 4; i++) refusal(() => auth.check(envOf(mallory, [forged(mallory)]), job));
    expect(refusal(() => auth.check(envOf(mallory, [forged(mallory)]), job))).toMatch(new RegExp(`^key ${mallory.id} is refused for 60 s`));
    expect(() => auth.check(envOf(alice, [grant(root, alice)]), job)).not.toThrow();
  });
});

describe('a node sent junk chains', () => {
  let node: LocalNode;
  beforeAll(async () => {
    node = await startLocalNode({ config: { network: { enabled: false } } });
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

/**
 * The same bounds on a real node, from the network: a libp2p peer sends envelopes carrying
 * forged chains under the node's own operator DID (a root there). What they cost the node is
 * read from its signature-check counters on /metrics, not from a clock.
 */
describe('a node sent forged chains by a libp2p peer', () => {
  let node: LocalNode;
  let attacker: ForeignPeer;
  let genuine: ForeignPeer;
  beforeAll(async () => {
    node = await startLocalNode({ timeoutMs: 45_000 });
    attacker = await ForeignPeer.connectedTo(node);
    genuine = await ForeignPeer.connectedTo(node);
  }, 120_000);
  afterAll(async () => {
    await attacker?.stop();
    await genuine?.stop();
    await node?.stop();
    if (node) removeHome(node.home);
  });

  const BE = '/dms/node/peers/list';
  let asked = 0;
  const send = async (peer: ForeignPeer, cap: Token[]): Promise<string> => {
    const cont = `/private/r/chain-${++asked}`;
    await peer.send(peer.envelope(node, { be: BE, cont, cap: encodeTokenList(cap) }));
    return cont;
  };
  const answer = async (peer: ForeignPeer, cont: string) => decodePayload((await peer.waitReply(cont, 20_000)).msg) as { error?: string; peers?: unknown };
  const ask = async (peer: ForeignPeer, cap: Token[]) => answer(peer, await send(peer, cap));
  /** Token signatures the node has verified, by outcome (fresh checks only: cache hits are not counted). */
  const checks = async (): Promise<{ valid: number; invalid: number }> => {
    const text = await (await fetch(`${node.url}/metrics`)).text();
    const count = (result: string) => Number(new RegExp(`^dms_capability_signature_checks\\{result="${result}"\\} (\\d+)`, 'm').exec(text)?.[1] ?? NaN);
    return { valid: count('valid'), invalid: count('invalid') };
  };
  const notGranted = (peer: ForeignPeer, why: string) => `capability ${BE} not granted to ${peer.key.did} (${why})`;

  it('refuses a too-deep chain with no signature check, and a list of forged chains with one', { timeout: 60_000 }, async () => {
    const operator = node.operator();
    const before = await checks();
    const deep = await ask(attacker, [junkChain(16, operator, false)]);
    expect(deep.error).toBe(notGranted(attacker, 'cap[0]: a chain of 16 links is longer than this node accepts (at most 4: capabilities.max_chain_links)'));
    const list = await ask(attacker, Array.from({ length: LIMITS.listTokens }, () => junkChain(3, operator, false)));
    expect(list.error).toMatch(/\(cap\[0\]: link 1 of 3: signature does not verify \(tampered, or not signed by its issuer\); cap\[1\]: not checked: /);
    expect(await checks()).toEqual({ valid: before.valid, invalid: before.invalid + 1 });
  });

  it('cuts the peer off once past its budget, while a genuine peer with a valid chain still gets through', { timeout: 90_000 }, async () => {
    const operator = node.operator();
    // Default budget: 10 failing signatures a second. Batches of 30 distinct forgeries, sent
    // at once, exceed it however slowly the node answers them.
    let cutOff: string | undefined;
    for (let batch = 0; batch < 5 && !cutOff; batch++) {
      const conts = await Promise.all(Array.from({ length: 30 }, () => send(attacker, [junkChain(2, operator, false)])));
      const errors = await Promise.all(conts.map(async (c) => (await answer(attacker, c)).error ?? ''));
      for (const e of errors) expect(e).toMatch(/signature does not verify|is refused for/);
      cutOff = errors.find((e) => e.includes('is refused for'));
    }
    expect(cutOff, 'the attacker was never cut off').toBe(
      `peer ${attacker.host} is refused for 60 s: it sent capability tokens whose signatures do not verify, more than 10 a second (capabilities.peer_bad_signatures_per_s)`,
    );
    // Cut off, its forgeries cost nothing, and even a valid grant does not help it.
    const spent = await checks();
    expect((await ask(attacker, [junkChain(2, operator, false)])).error).toBe(cutOff);
    expect((await ask(attacker, [issueToken(operator, { act: 'invoke', aud: attacker.key.did, cap: [BE], exp: later() })])).error).toBe(cutOff);
    expect(await checks()).toEqual(spent);

    // The genuine peer's two-link chain verifies once, then comes from the cache.
    const lead = KeyPair.generate();
    const delegation = issueToken(operator, { act: 'delegate', aud: lead.did, cap: ['/dms/node'], depth: 1, exp: later(2) });
    const chain = issueToken(lead, { act: 'invoke', aud: genuine.key.did, cap: [BE], exp: later(), chain: delegation });
    const ok = await ask(genuine, [chain]);
    expect(ok.error).toBeUndefined();
    expect(ok.peers).toBeDefined();
    expect(await checks()).toEqual({ valid: spent.valid + 2, invalid: spent.invalid });
    expect((await ask(genuine, [chain])).peers).toBeDefined();
    expect(await checks()).toEqual({ valid: spent.valid + 2, invalid: spent.invalid });
  });
});
