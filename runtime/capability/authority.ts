import type { Inbox } from '../actor.js';
import type { Behavior } from '../behavior.js';
import { DmsError } from '../errors.js';
import type { ActorSystem } from '../system.js';
import { nowNs } from '../time.js';
import { type Envelope, isBroadcast } from '../wire/envelope.js';
import type { Anchors } from './anchors.js';
import { FailureBudget } from './budget.js';
import { ChainCache, type SignatureCount } from './cache.js';
import { type CheckedList, checkChain, DEFAULT_MAX_CHAIN_LINKS, type Grant, type TrustView } from './chain.js';
import { anyImplies, implies, parsePath } from './paths.js';
import { encodeTokenList, LIMITS, signatureValid, type Token } from './token.js';

/** What a node opens to everyone, beyond `/public` (always open). */
export interface Policy {
  /** Broadcast topics anyone may publish on to this node's `/broadcast/*` behaviors. */
  openTopics: readonly string[];
  /** Capabilities anyone may use. */
  openCapabilities: readonly string[];
}

export const DEFAULT_POLICY: Policy = { openTopics: ['/dms/hello'], openCapabilities: [] };

/** What a stranger may cost this node in token verification (the `capabilities.*` config keys). */
export interface AuthorityLimits {
  /** Longest chain accepted (`max_chain_links`). */
  maxChainLinks: number;
  /** Failing signature checks a second a sender may cause before it is refused (`peer_bad_signatures_per_s`). */
  peerBadSignaturesPerS: number;
  /** How long such a sender is refused, seconds (`peer_refuse_s`). */
  peerRefuseS: number;
  /** Milliseconds, for the budget; tests pass their own. */
  clock: () => number;
}

export const DEFAULT_LIMITS: AuthorityLimits = { maxChainLinks: DEFAULT_MAX_CHAIN_LINKS, peerBadSignaturesPerS: 10, peerRefuseS: 60, clock: Date.now };

const PUBLIC = '/public';
const BROADCAST = '/broadcast';

/** The capability a behavior needs: its declared one, else its name; '' means none. */
export const capabilityOf = (b: Pick<Behavior, 'name' | 'capability'>): string => b.capability ?? b.name;

const forbidden = (text: string) => new DmsError('forbidden', text);

/**
 * Decides who may run what on this node. Trusted without tokens: the node's own key and
 * actors, and the root DIDs. Everyone else needs a grant — from a token chain attached to the
 * envelope (`cap`) or a `require` anchor naming them — that covers the behavior's capability,
 * or, for a broadcast, its topic. Verdicts on tokens are cached (ChainCache), and a sender
 * whose tokens make the node check too many signatures that fail is refused for a while.
 */
export class Authority implements TrustView {
  private roots = new Set<string>();
  private revoked = new Map<string, Set<string>>();
  private required = new Map<string, Grant[]>();
  private provided: Token[] = [];
  private readonly provideMemo = new Map<string, { bytes: Uint8Array | undefined; until: bigint }>();
  private readonly policy: Policy;
  readonly cache: ChainCache;
  readonly maxChainLinks: number;
  private readonly budget: FailureBudget;
  /** Why some `require` anchors of the last load grant nothing (for the node's log). */
  problems: readonly string[] = [];
  /**
   * Envelopes a grant already let through, with what it let them do and until when: the REST
   * pre-check and the dispatch check see the same envelope, and the second costs nothing.
   */
  private passed = new WeakMap<Envelope, { need: string; exp: bigint }>();

  constructor(
    anchors: Anchors,
    policy: Policy = DEFAULT_POLICY,
    /** Key ids whose envelopes are the node's own (its key, its actors' keys). */
    private readonly own: (id: string) => boolean = () => false,
    limits: Partial<AuthorityLimits> = {},
  ) {
    const l = { ...DEFAULT_LIMITS, ...limits };
    this.maxChainLinks = l.maxChainLinks;
    this.budget = new FailureBudget({ perSecond: l.peerBadSignaturesPerS, refuseS: l.peerRefuseS, clock: l.clock });
    this.policy = {
      openTopics: policy.openTopics.map((t) => parsePath(t, 'open topic')),
      openCapabilities: policy.openCapabilities.map((c) => parsePath(c, 'open capability')),
    };
    this.cache = new ChainCache(this);
    this.load(anchors);
  }

  /**
   * Replaces the anchors (file changed). Every cached verdict may depend on roots and
   * revocations, so the cache starts over. Returns why some `require` tokens grant nothing.
   */
  load(a: Anchors): string[] {
    this.roots = new Set(a.root);
    const revoked = new Map<string, Set<string>>();
    // Only signed revocations count; whether the signer may revoke a link is checked per chain.
    for (const r of a.revoke) {
      if (r.act !== 'revoke' || !r.rev || !signatureValid(r)) continue;
      let set = revoked.get(r.rev);
      if (!set) revoked.set(r.rev, (set = new Set()));
      set.add(r.iss);
    }
    this.revoked = revoked;
    const problems: string[] = [];
    const required = new Map<string, Grant[]>();
    a.require.forEach((t, i) => {
      const r = checkChain(t, this);
      if (!r.ok) return problems.push(`require[${i}]: ${r.reason}`);
      const list = required.get(r.grant.aud) ?? [];
      list.push(r.grant);
      required.set(r.grant.aud, list);
    });
    this.required = required;
    this.provided = a.provide;
    this.provideMemo.clear();
    this.cache.clear();
    this.passed = new WeakMap();
    this.problems = problems;
    return problems;
  }

  isRoot(did: string): boolean {
    return this.roots.has(did);
  }

  revokers(id: string): ReadonlySet<string> | undefined {
    return this.revoked.get(id);
  }

  /** Whether the (verified) sender is trusted without tokens: a root DID or one of the node's own keys. */
  trusted(env: Envelope): boolean {
    return this.roots.has(env.from.did) || this.own(env.from.id);
  }

  /**
   * Throws `forbidden` unless `env` may run `behavior` (installed as the system's authorizer).
   * `peer` is the libp2p peer a network envelope came from: the sender its failing signatures
   * are charged to (without one, its signing key is).
   */
  check(env: Envelope, behavior: Pick<Behavior, 'name' | 'capability'>, peer?: string): void {
    const need = capabilityOf(behavior);
    if (need === '') return;
    const capOpen = implies(PUBLIC, need) || anyImplies(this.policy.openCapabilities, need);
    if (isBroadcast(env)) return this.checkBroadcast(env, need, capOpen, peer);
    if (capOpen || this.trusted(env)) return;
    const now = nowNs();
    if (this.passedBefore(env, need, now)) return;
    const ok = (g: Grant) => g.aud === env.from.did && g.act !== 'broadcast' && g.exp > now && anyImplies(g.cap, need);
    const attached = this.find(env, need, ok, peer);
    if (!attached) return;
    throw forbidden(this.denial(`capability ${need} not granted to ${env.from.did || '(unsigned sender)'}`, env, now, attached));
  }

  /**
   * A broadcast needs its topic (open by policy, or a broadcast/delegate grant naming it); a
   * behavior outside `/broadcast` and `/public` needs its capability from that same grant.
   */
  private checkBroadcast(env: Envelope, need: string, capOpen: boolean, peer?: string): void {
    const topic = env.opt.topic ?? '';
    const topicOpen = topic !== '' && anyImplies(this.policy.openTopics, topic);
    const behaviorOpen = capOpen || implies(BROADCAST, need);
    if ((topicOpen && behaviorOpen) || this.trusted(env)) return;
    const now = nowNs();
    if (this.passedBefore(env, need, now)) return;
    const ok = (g: Grant) =>
      g.aud === env.from.did &&
      g.act !== 'invoke' &&
      g.exp > now &&
      (topicOpen || anyImplies(g.topic, topic)) &&
      (behaviorOpen || anyImplies(g.cap, need));
    const attached = this.find(env, need, ok, peer);
    if (!attached) return;
    const what = topicOpen ? `capability ${need}` : behaviorOpen ? `broadcast on topic ${topic}` : `broadcast of ${need} on topic ${topic}`;
    throw forbidden(this.denial(`${what} not granted to ${env.from.did || '(unsigned sender)'}`, env, now, attached));
  }

  /** Whether `env`'s sender may publish on its topic at all (REST answers 403 before publishing). */
  checkTopic(env: Envelope): void {
    this.checkBroadcast(env, BROADCAST, false);
  }

  private passedBefore(env: Envelope, need: string, now: bigint): boolean {
    const p = this.passed.get(env);
    return p !== undefined && p.need === need && p.exp > now;
  }

  /**
   * Looks for a grant `ok` accepts; undefined when found, else the attached tokens' verdicts
   * (for the refusal). A refused sender is turned away before any of its tokens is read.
   */
  private find(env: Envelope, need: string, ok: (g: Grant) => boolean, peer?: string): CheckedList | undefined {
    const sender = peer === undefined ? `key ${env.from.id}` : `peer ${peer}`;
    if (this.budget.isRefused(sender)) throw forbidden(this.refusal(sender));
    const spent: SignatureCount = { valid: 0, invalid: 0 };
    const attached = this.cache.check(env.cap, spent);
    if (spent.invalid > 0) this.budget.spend(sender, spent.invalid);
    let hit = attached.grants.find(ok);
    if (!hit) hit = this.required.get(env.from.did)?.find(ok);
    if (!hit) return attached;
    this.passed.set(env, { need, exp: hit.exp });
    return undefined;
  }

  private refusal(sender: string): string {
    const { refuseS, perSecond } = this.budget.options;
    return `${sender} is refused for ${refuseS} s: it sent capability tokens whose signatures do not verify, more than ${perSecond} a second (capabilities.peer_bad_signatures_per_s)`;
  }

  /** Senders refused now for failing signatures (the node's metrics). */
  refusedSenders(): number {
    return this.budget.refusedNow();
  }

  /** The refusal text: what is missing and, when tokens came along, why they did not help. */
  private denial(base: string, env: Envelope, now: bigint, { grants, problems }: CheckedList): string {
    const notes = [...problems];
    for (const g of grants) {
      if (g.aud !== env.from.did) notes.push(`a token is for ${g.aud}, not the sender`);
      else if (g.exp <= now) notes.push(g.linkExps.length > 1 ? `token chain expired (expired link)` : 'token expired');
    }
    return notes.length ? `${base} (${notes.slice(0, 3).join('; ')})` : base;
  }

  /**
   * The REST pre-check: refuse at once (403) what this node's actors would refuse anyway, so a
   * local caller does not wait for a reply that will only say no. Remote destinations decide
   * for themselves; an unknown inbox or behavior is left to routing (404).
   */
  precheck(system: ActorSystem, env: Envelope): void {
    if (isBroadcast(env)) return this.checkTopic(env);
    const host = env.to.addr.host;
    if (host !== '' && host !== system.host) return;
    const behavior = system.inbox(env.to.addr.inbox)?.behaviors.get(env.be);
    if (behavior) this.check(env, behavior);
  }

  /**
   * The `provide` tokens to attach to an outgoing envelope signed by `did`: those granted to
   * `did` that cover the behavior (or the topic, for a broadcast) and have not expired.
   */
  provideFor(did: string, be: string, topic?: string): Uint8Array | undefined {
    if (this.provided.length === 0) return undefined;
    const key = `${did} ${be} ${topic ?? ''}`;
    const now = nowNs();
    const memo = this.provideMemo.get(key);
    if (memo && memo.until > now) return memo.bytes;
    const fit = this.provided.filter(
      (t) => t.aud === did && t.exp > now && (topic ? anyImplies(t.topic, topic) : anyImplies(t.cap, be)),
    );
    const bytes = fit.length ? encodeTokenList(fit.slice(0, LIMITS.listTokens)) : undefined;
    const until = fit.reduce((m, t) => (t.exp < m ? t.exp : m), now + 60_000_000_000n);
    if (this.provideMemo.size > 1000) this.provideMemo.clear();
    this.provideMemo.set(key, { bytes, until });
    return bytes;
  }
}

/**
 * Installs the authority as the system's authorizer: every behavior dispatch, local or from
 * the network, passes `check`, charged to the peer a network envelope came from; and its trusted senders are the ones the replay cache keeps a
 * reserve for. The node's own key and every actor key of this system count as the node's own.
 */
export function installAuthority(system: ActorSystem, authority: Authority): void {
  system.setAuthorizer((env: Envelope, behavior: Behavior<any, any>, _inbox: Inbox) => authority.check(env, behavior, system.peerOf(env)));
  // The same senders may use the replay cache's reserve, which throwaway keys cannot fill.
  system.setSenderTrust((env) => authority.trusted(env));
}

/** Envelopes signed by the node key or by one of its actors' keys are the node's own. */
export function ownKeys(system: ActorSystem): (id: string) => boolean {
  return (id) => system.ownsKey(id);
}
