import { errorText } from '../errors.js';
import { covers } from './paths.js';
import { type Action, decodeTokenList, linksOf, signatureValid, type Token, tokenId } from './token.js';

/**
 * What a verified chain grants: the leaf's audience, action, capabilities and topics, valid
 * until the earliest expiry along the chain. Time is not part of verification (so results can
 * be cached); whoever uses a grant compares `exp` with the clock.
 */
export interface Grant {
  id: string;
  act: Exclude<Action, 'revoke'>;
  aud: string;
  cap: readonly string[];
  topic: readonly string[];
  exp: bigint;
  /** Issuer of the chain's first link: a root of the verifying node. */
  root: string;
  /** Expiry of each link, root first, to say which link ran out. */
  linkExps: readonly bigint[];
}

export type Checked = { ok: true; grant: Grant } | { ok: false; reason: string };

/** Links a chain may have by default (`capabilities.max_chain_links`): root grant and three delegations. */
export const DEFAULT_MAX_CHAIN_LINKS = 4;

/** What verification needs to know about the node's trust anchors. */
export interface TrustView {
  isRoot(did: string): boolean;
  /** Issuers of valid revocations of the token with this id. */
  revokers(id: string): ReadonlySet<string> | undefined;
  /** Longest chain accepted; DEFAULT_MAX_CHAIN_LINKS when absent. */
  readonly maxChainLinks?: number;
}

/**
 * Why `child` may not hang below `parent`, or undefined when it may: the child is issued by
 * the parent's audience, the parent is a delegation with depth left, and the child narrows
 * (capabilities, topics, expiry, depth) — it never grants more than it was granted.
 */
export function delegationProblem(parent: Token, child: Token): string | undefined {
  if (child.iss !== parent.aud) return `issued by ${child.iss}, but the link above grants ${parent.aud || 'nobody'} (wrong issuer)`;
  if (parent.act !== 'delegate') return `the link above is a(n) ${parent.act} token, which cannot be delegated`;
  if (parent.depth < 1) return 'delegation depth exceeded: the link above allows no further delegation';
  if (child.depth > parent.depth - 1) return `depth ${child.depth} exceeds the ${parent.depth - 1} the link above leaves (delegation depth exceeded)`;
  if (!covers(parent.cap, child.cap)) return `capabilities ${child.cap.join(', ')} are broader than the link above grants (${parent.cap.join(', ') || 'none'})`;
  if (!covers(parent.topic, child.topic)) return `topics ${child.topic.join(', ')} are broader than the link above grants (${parent.topic.join(', ') || 'none'})`;
  if (child.exp > parent.exp) return 'expires after the link above (an expiry may only be narrowed)';
  return undefined;
}

/** Whether a token's own signature verifies (not its chain's): `signatureValid`, or a cached verdict of it. */
export type SignatureCheck = (t: Token) => boolean;

/**
 * Verifies a token and its chain against a node's trust. Links are numbered from the root (link 1).
 *
 * Signatures are the expensive part (one Ed25519 verification per link), and a stranger
 * chooses the chain and can forge one for nothing. So everything that needs no signature
 * comes first, and a chain failing it costs no verification at all: the first link's issuer
 * must be a root here, the chain no longer than `maxChainLinks`, every link must hang
 * correctly below the one above (issuer, narrowing, expiry, depth), and with `now` given no
 * link may have expired. Signatures are then checked root first, stopping at the first bad
 * one: a forged chain under a known root costs one verification, however long.
 *
 * Without `now` the verdict does not depend on the clock and may be cached for good; with it,
 * an expired chain is refused, which stays true as time goes on.
 */
export function checkChain(token: Token, trust: TrustView, verify: SignatureCheck = signatureValid, now?: bigint): Checked {
  if (token.act === 'revoke') return { ok: false, reason: 'a revocation grants nothing' };
  const links = linksOf(token).reverse(); // root first
  const n = links.length;
  const at = (i: number) => (n === 1 ? 'token' : `link ${i + 1} of ${n}`);
  if (!trust.isRoot(links[0].iss)) return { ok: false, reason: `${at(0)}: issuer ${links[0].iss} is not trusted by this node (wrong issuer)` };
  const max = trust.maxChainLinks ?? DEFAULT_MAX_CHAIN_LINKS;
  if (n > max) return { ok: false, reason: `a chain of ${n} links is longer than this node accepts (at most ${max}: capabilities.max_chain_links)` };
  for (let i = 1; i < n; i++) {
    const problem = delegationProblem(links[i - 1], links[i]);
    if (problem) return { ok: false, reason: `${at(i)}: ${problem}` };
  }
  if (now !== undefined) {
    const i = links.findIndex((l) => l.exp <= now);
    if (i >= 0) return { ok: false, reason: n === 1 ? 'token expired' : `${at(i)} expired (expired link)` };
  }
  for (let i = 0; i < n; i++) {
    if (!verify(links[i])) return { ok: false, reason: `${at(i)}: signature does not verify (tampered, or not signed by its issuer)` };
  }
  // A revocation counts when a root made it, or the issuer of the revoked link or of a link
  // above it: whoever granted something may take it back, nobody below may.
  for (let i = 0; i < n; i++) {
    const revokers = trust.revokers(tokenId(links[i]));
    if (!revokers) continue;
    for (const r of revokers) {
      if (trust.isRoot(r) || links.slice(0, i + 1).some((l) => l.iss === r)) return { ok: false, reason: `${at(i)}: revoked by ${r}` };
    }
  }
  const linkExps = links.map((l) => l.exp);
  const exp = linkExps.reduce((a, b) => (b < a ? b : a));
  return {
    ok: true,
    grant: { id: tokenId(token), act: token.act, aud: token.aud, cap: token.cap, topic: token.topic, exp, root: links[0].iss, linkExps },
  };
}

/** Why a grant is unusable at `now`, naming the link that ran out. */
export function expiryProblem(g: Grant, now: bigint): string | undefined {
  if (g.exp > now) return undefined;
  const i = g.linkExps.findIndex((e) => e <= now);
  return g.linkExps.length === 1 ? 'token expired' : `link ${i + 1} of ${g.linkExps.length} expired (expired link)`;
}

/** An envelope's `cap`, verified: the grants it proves, and why the other tokens prove nothing. */
export interface CheckedList {
  grants: Grant[];
  problems: string[];
}

/** Reads an envelope's `cap` and checks each token with `check`; a list that does not parse proves nothing. */
export function checkTokenList(bytes: Uint8Array, trust: TrustView, check: (t: Token) => Checked = (t) => checkChain(t, trust)): CheckedList {
  let tokens: Token[];
  try {
    tokens = decodeTokenList(bytes);
  } catch (e) {
    const why = errorText(e);
    return { grants: [], problems: [why.startsWith('cap') ? why : `cap: ${why}`] };
  }
  const out: CheckedList = { grants: [], problems: [] };
  tokens.forEach((t, i) => {
    const r = check(t);
    if (r.ok) out.grants.push(r.grant);
    else out.problems.push(`cap[${i}]: ${r.reason}`);
  });
  return out;
}
