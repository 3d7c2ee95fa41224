import { type Checked, checkChain, type CheckedList, checkTokenList, type TrustView } from './chain.js';
import { nowNs } from '../time.js';
import { signatureValid, type Token, tokenId } from './token.js';

/**
 * Verdicts on capability tokens, kept so that a token costs its signatures once however it
 * arrives. Three levels, cheapest first:
 *
 * - whole `cap` lists by their exact bytes: clients attach the same list call after call, and
 *   a hit skips even the parsing;
 * - chain verdicts by token id: the same tokens in another order or combination (which a
 *   cache of whole lists cannot recognise) cost a parse and look-ups, no signature;
 * - signature verdicts by link id: a new leaf below a known chain pays for its own signature.
 *
 * Verdicts do not depend on the clock (see Grant), except that an expired chain is refused
 * without checking its signatures, which stays true. Lists and chain verdicts do depend on the
 * roots and revocations, so the owner calls `clear()` when those change; whether a signature
 * verifies depends on nothing, so those verdicts stay.
 *
 * Within one list, once a signature fails, no further signature is checked: a genuine sender
 * never attaches a forgery, and 16 forged tokens would otherwise cost 16 verifications.
 */
export interface ChainCacheOptions {
  /** Lists kept (default 10 000). */
  lists?: number;
  /** Bound on the kept lists' total size: lists may be up to 64 KiB each (default 32 MiB). */
  listBytes?: number;
  /** Chain verdicts kept (default 10 000). */
  tokens?: number;
  /** Signature verdicts kept (default 50 000). */
  signatures?: number;
}

const EMPTY: CheckedList = { grants: [], problems: [] };

/** Signatures verified afresh (not found in the cache), by outcome. */
export interface SignatureCount {
  valid: number;
  invalid: number;
}

const NOT_CHECKED = 'not checked: an earlier token of this list has a signature that does not verify';

/** A map that forgets its oldest entry first once full: a flood of distinct junk cannot grow memory. */
class Bounded<V> {
  private readonly entries = new Map<string, V>();
  constructor(private readonly capacity: number) {}
  get size(): number {
    return this.entries.size;
  }
  get(key: string): V | undefined {
    return this.entries.get(key);
  }
  set(key: string, value: V): void {
    if (this.entries.size >= this.capacity) this.entries.delete(this.entries.keys().next().value!);
    this.entries.set(key, value);
  }
  clear(): void {
    this.entries.clear();
  }
}

export class ChainCache {
  private readonly lists = new Map<string, CheckedList>();
  private listBytes = 0;
  private readonly verdicts: Bounded<Checked>;
  private readonly signatures: Bounded<boolean>;
  private readonly maxLists: number;
  private readonly maxListBytes: number;
  /** Every signature this cache had verified, by outcome (the node's metrics). */
  readonly verified: SignatureCount = { valid: 0, invalid: 0 };

  constructor(
    private readonly trust: TrustView,
    opts: ChainCacheOptions = {},
  ) {
    this.maxLists = opts.lists ?? 10_000;
    this.maxListBytes = opts.listBytes ?? 32 * 1024 * 1024;
    this.verdicts = new Bounded(opts.tokens ?? 10_000);
    this.signatures = new Bounded(opts.signatures ?? 50_000);
  }

  /** Lists held. */
  get size(): number {
    return this.lists.size;
  }

  /** An envelope's `cap`, verified; the signatures this took are added to `spent`. */
  check(bytes: Uint8Array | undefined, spent?: SignatureCount): CheckedList {
    if (!bytes || bytes.length === 0) return EMPTY;
    const key = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString('latin1');
    let hit = this.lists.get(key);
    if (!hit) {
      const list: SignatureCount = { valid: 0, invalid: 0 };
      const now = nowNs();
      hit = checkTokenList(bytes, this.trust, (t) => this.verdict(t, list, now));
      if (spent) {
        spent.valid += list.valid;
        spent.invalid += list.invalid;
      }
      while (this.lists.size && (this.lists.size >= this.maxLists || this.listBytes + key.length > this.maxListBytes)) {
        const oldest = this.lists.keys().next().value!;
        this.lists.delete(oldest);
        this.listBytes -= oldest.length;
      }
      this.lists.set(key, hit);
      this.listBytes += key.length;
    }
    return hit;
  }

  /**
   * One token and its chain, verified (see `checkChain`); fresh signature checks are counted
   * in `list`, and none is made once it holds a failure.
   */
  verdict(t: Token, list: SignatureCount = { valid: 0, invalid: 0 }, now = nowNs()): Checked {
    const id = tokenId(t);
    const known = this.verdicts.get(id);
    if (known) return known;
    let reachedSignatures = false;
    let skipped = false;
    const r = checkChain(
      t,
      this.trust,
      (link) => {
        reachedSignatures = true;
        const ok = this.signature(link, list);
        if (ok === undefined) skipped = true;
        return ok === true;
      },
      now,
    );
    if (skipped) return { ok: false, reason: NOT_CHECKED };
    // A chain refused before any signature (untrusted root, bad shape, expired) is as cheap to
    // refuse again as to look up: only verdicts that cost something take room from others.
    if (reachedSignatures) this.verdicts.set(id, r);
    return r;
  }

  /** Whether `link`'s own signature verifies; undefined when it was not checked (the list already failed one). */
  private signature(link: Token, list: SignatureCount): boolean | undefined {
    const id = tokenId(link);
    let ok = this.signatures.get(id);
    if (ok !== undefined) return ok;
    if (list.invalid > 0) return undefined;
    ok = signatureValid(link);
    this.signatures.set(id, ok);
    const outcome = ok ? 'valid' : 'invalid';
    list[outcome]++;
    this.verified[outcome]++;
    return ok;
  }

  /** Forgets every verdict that depends on the roots and revocations. */
  clear(): void {
    this.lists.clear();
    this.listBytes = 0;
    this.verdicts.clear();
  }
}
