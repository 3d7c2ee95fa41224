import { DmsError, invalid } from './errors.js';
import { ceilDouble, CountTable, EntryTable, floorDouble, LOAD, type SenderHash, senderHash } from './replay-table.js';
import { nowNs } from './time.js';

export interface ReplayLimits {
  /** Most unexpired entries in all. */
  capacity: number;
  /** Most unexpired entries one untrusted sender (from.id) may hold. */
  perSender: number;
  /**
   * Most unexpired entries one libp2p peer (or one REST client signing with keys of its own) may
   * hold, whatever from.id its envelopes carry. Default: no cap of its own.
   */
  perPeer?: number;
  /**
   * Most unexpired entries the envelopes this node signs as the operator for unsigned REST
   * callers may hold together, and never more than half the reserve: so they can neither lock
   * the operator's own signed calls and the node's actors out, nor take room from the peers.
   */
  restQuota?: number;
  /**
   * Entries only trusted senders (the node's own keys, its root anchors) may use: many
   * throwaway keys, each within its share, together still cannot lock the operator out.
   * Defaults to a tenth of the capacity.
   */
  reserve?: number;
}

/** Whose share an entry counts against (ActorSystem.admit decides, from where the envelope came). */
export type ReplayOwner =
  /** The node's own actors and keys, its root anchors (the operator's own signed calls): the reserve, no cap. */
  | { kind: 'trusted' }
  /** A libp2p peer: the connection's authenticated peer id (on gossip, the signed publisher). `perPeer`. */
  | { kind: 'peer'; id: string }
  /** A REST client whose envelopes carry their own signature (its principal, else its address). `perPeer`. */
  | { kind: 'rest-client'; client: string }
  /** An envelope this node signed as the operator for an unsigned REST caller: `restQuota`. */
  | { kind: 'rest-signed' }
  /** Held to the open share and `perSender` only (an in-process caller with no connection). */
  | { kind: 'sender' };

export const TRUSTED: ReplayOwner = { kind: 'trusted' };

/** Where admitted entries are persisted, so they outlive the process (runtime/replay-log.ts). */
export interface ReplayJournal {
  /** Persists one entry before the cache counts it; throws when it cannot. */
  append(sender: SenderHash, nonce: bigint, exp: bigint): void;
  /** Called after each admission with the cache, whose live entries it may rewrite itself from. */
  settle(cache: ReplayCache): void;
  close(): void;
}

const REPLAYED = 'replayed envelope: this (from.id, nonce) was already delivered';
const FULL = 'replay cache is full of unexpired envelopes; retry later';

// Owner indexes of the fixed classes; a peer's or REST client's is FIRST_NAMED or above.
const OWNER_TRUSTED = 0;
const OWNER_REST_SIGNED = 1;
/** Entries read back from the log at start: they count in the whole, against no share. */
const OWNER_RESTORED = 2;
const OWNER_SENDER = 3;
const FIRST_NAMED = 4;

const overloaded = (message: string) => new DmsError('overloaded', message, { retryAfter: 1 });

/**
 * Remembers (from.id, nonce) of delivered envelopes until their exp (README "Replay protection").
 * Bounded: when full of unexpired entries it refuses new envelopes (503) rather than forgetting
 * one, since a forgotten entry is a replay window. Entries are recorded before authorization
 * (that happens at dispatch), so the bounds are per owner (a peer, a REST client, the envelopes
 * the node signs for REST) and per sender, with a reserve for trusted senders. An entry is a
 * fixed record keyed by (SHA-256(from.id) truncated to 96 bits, nonce): see runtime/replay-table.ts.
 */
export class ReplayCache {
  readonly capacity: number;
  readonly perSender: number;
  readonly perPeer: number;
  /** Entries the node's REST signing may hold: `restQuota`, within half the reserve. */
  readonly restQuota: number;
  /** Entries untrusted senders may fill together. */
  private readonly openShare: number;
  private readonly table: EntryTable;
  private readonly senders: CountTable;
  /** Entries each owner holds, by owner index. */
  private readonly counts: number[] = [0, 0, 0, 0];
  /** Owner index of each peer or REST client holding entries, by `peer <id>` / `REST client <client>`. */
  private readonly named = new Map<string, number>();
  private readonly names: string[] = ['', '', '', ''];
  private readonly freeOwners: number[] = [];

  constructor(
    limits: ReplayLimits | number,
    private readonly journal?: ReplayJournal,
  ) {
    const l = typeof limits === 'number' ? { capacity: limits, perSender: limits, reserve: 0 } : limits;
    this.capacity = l.capacity;
    this.perSender = l.perSender;
    this.perPeer = l.perPeer ?? l.capacity;
    const reserve = Math.min(l.reserve ?? Math.floor(l.capacity / 10), l.capacity);
    this.openShare = l.capacity - reserve;
    this.restQuota = Math.min(l.restQuota ?? l.capacity, Math.max(1, Math.ceil(reserve / 2)));
    this.table = new EntryTable(Math.ceil(l.capacity / LOAD));
    this.senders = new CountTable(Math.ceil(l.capacity / LOAD));
  }

  get size(): number {
    return this.table.size;
  }

  /** Bytes the cache's arrays take now (README "Replay protection" states them per entry). */
  get bytes(): number {
    return this.table.bytes + this.senders.bytes;
  }

  /** Unexpired entries of one sender (as of the last purge). */
  held(fromId: string): number {
    return this.senders.get(senderHash(fromId));
  }

  /** Unexpired entries counted against one owner (as of the last purge). */
  heldBy(owner: ReplayOwner): number {
    const i = this.ownerIndex(owner);
    return i === undefined ? 0 : this.counts[i];
  }

  /**
   * Records the pair, or throws when it was seen before (replay, 400) or the owner's share, the
   * sender's, or the cache is full (503). `true` is short for the trusted owner, `false` for one
   * held to the sender's share only.
   */
  admit(fromId: string, nonce: bigint, exp: bigint, now: bigint = nowNs(), owner: ReplayOwner | boolean = false): void {
    this.purge(now);
    const s = senderHash(fromId);
    const lo = Number(nonce & 0xffffffffn);
    const hi = Number(nonce >> 32n);
    if (this.table.has(s, lo, hi)) throw invalid(REPLAYED);
    // Nothing to remember: it could not be delivered anyway (the system refuses it first).
    if (exp <= now) return;
    const o: ReplayOwner = owner === true ? TRUSTED : owner === false ? { kind: 'sender' } : owner;
    this.check(o, fromId, s);
    this.journal?.append(s, nonce, exp);
    this.insert(s, lo, hi, exp, this.acquire(o));
    this.journal?.settle(this);
  }

  /** Puts back an entry persisted earlier, outside every bound: it was admitted once already. */
  restore(fromId: string | SenderHash, nonce: bigint, exp: bigint, now: bigint = nowNs()): void {
    const s = typeof fromId === 'string' ? senderHash(fromId) : fromId;
    const lo = Number(nonce & 0xffffffffn);
    const hi = Number(nonce >> 32n);
    if (exp <= now || this.table.has(s, lo, hi)) return;
    this.insert(s, lo, hi, exp, OWNER_RESTORED);
  }

  /** Visits the live entries (for the journal's rewrite); exp as stored: rounded up to a double, never earlier. */
  forEachEntry(visit: (sender: SenderHash, nonce: bigint, exp: bigint) => void, now: bigint = nowNs()): void {
    this.purge(now);
    this.table.forEach((sender, lo, hi, exp) => visit(sender, (BigInt(hi) << 32n) | BigInt(lo), BigInt(exp)));
  }

  purge(now: bigint = nowNs()): void {
    this.table.expire(floorDouble(now), (sender, _lo, _hi, _exp, owner) => {
      this.senders.decrement(sender);
      if (--this.counts[owner] === 0 && owner >= FIRST_NAMED) this.release(owner);
    });
  }

  close(): void {
    this.journal?.close();
  }

  /** Throws when `owner` may not add an entry now (the caller has purged). */
  private check(owner: ReplayOwner, fromId: string, s: SenderHash): void {
    if (this.size >= this.capacity) throw overloaded(FULL);
    if (owner.kind === 'trusted') return;
    if (owner.kind === 'rest-signed') {
      const held = this.counts[OWNER_REST_SIGNED];
      if (held >= this.restQuota) {
        throw overloaded(`REST envelopes this node signed as the operator already hold ${held} unexpired entries in the replay cache (actor.replay_rest_quota); retry once some expire`);
      }
      return;
    }
    const untrusted = this.size - this.counts[OWNER_TRUSTED] - this.counts[OWNER_REST_SIGNED] - this.counts[OWNER_RESTORED];
    if (untrusted >= this.openShare) throw overloaded(FULL);
    if (owner.kind !== 'sender') {
      const i = this.ownerIndex(owner);
      const held = i === undefined ? 0 : this.counts[i];
      if (held >= this.perPeer) {
        throw overloaded(`${ownerName(owner)} already holds ${held} unexpired envelopes in the replay cache (actor.replay_per_peer); retry once some expire`);
      }
    }
    const held = this.senders.get(s);
    if (held >= this.perSender) {
      throw overloaded(`sender ${fromId} already holds ${held} unexpired envelopes in the replay cache (actor.replay_per_sender); retry once some expire`);
    }
  }

  private insert(s: SenderHash, lo: number, hi: number, exp: bigint, owner: number): void {
    this.table.insert(s, lo, hi, ceilDouble(exp), owner);
    this.senders.increment(s);
    this.counts[owner]++;
  }

  private ownerIndex(owner: ReplayOwner): number | undefined {
    switch (owner.kind) {
      case 'trusted':
        return OWNER_TRUSTED;
      case 'rest-signed':
        return OWNER_REST_SIGNED;
      case 'sender':
        return OWNER_SENDER;
      default:
        return this.named.get(ownerName(owner));
    }
  }

  /** The owner's index, made for a peer or REST client not holding entries yet. */
  private acquire(owner: ReplayOwner): number {
    const known = this.ownerIndex(owner);
    if (known !== undefined) return known;
    const name = ownerName(owner);
    const i = this.freeOwners.pop() ?? this.counts.length;
    this.counts[i] = 0;
    this.names[i] = name;
    this.named.set(name, i);
    return i;
  }

  private release(i: number): void {
    this.named.delete(this.names[i]);
    this.names[i] = '';
    this.freeOwners.push(i);
  }
}

function ownerName(owner: ReplayOwner): string {
  if (owner.kind === 'peer') return `peer ${owner.id}`;
  if (owner.kind === 'rest-client') return `REST client ${owner.client}`;
  return owner.kind;
}
