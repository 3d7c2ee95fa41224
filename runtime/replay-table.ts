import { createHash, randomBytes } from 'node:crypto';

/**
 * The replay cache's storage (runtime/replay.ts holds the policy): fixed-size records in typed
 * arrays, no string or object per envelope, so a full cache costs what README "Replay
 * protection" states and nothing a sender picks (a long from.id) makes an entry bigger.
 */

/**
 * A sender's 96-bit hash, the first 12 bytes of SHA-256(from.id), as three little-endian words.
 * Two from.ids share one only by a 2^96 chance, or (to aim at a given sender) 2^96 work.
 */
export type SenderHash = readonly [number, number, number];

export function senderHash(fromId: string): SenderHash {
  const d = createHash('sha256').update(fromId, 'utf8').digest();
  return [d.readUInt32LE(0), d.readUInt32LE(4), d.readUInt32LE(8)];
}

/** The 24 hex digits of a sender hash (what the replay log stores in place of from.id). */
export function senderHex(s: SenderHash): string {
  const b = Buffer.alloc(12);
  b.writeUInt32LE(s[0], 0);
  b.writeUInt32LE(s[1], 4);
  b.writeUInt32LE(s[2], 8);
  return b.toString('hex');
}

export function parseSenderHex(hex: string): SenderHash | undefined {
  if (!/^[0-9a-f]{24}$/.test(hex)) return undefined;
  const b = Buffer.from(hex, 'hex');
  return [b.readUInt32LE(0), b.readUInt32LE(4), b.readUInt32LE(8)];
}

const f64 = new Float64Array(1);
const bits = new BigUint64Array(f64.buffer);
const EXACT = 2n ** 53n;

/**
 * The least double ≥ x: an exp is stored rounded up, so an entry may outlive its exp by less
 * than 256 ns (the spacing of doubles near 2^60 ns) but never leaves before it.
 */
export function ceilDouble(x: bigint): number {
  if (x < EXACT) return Number(x);
  const f = Number(x);
  if (BigInt(f) >= x) return f;
  f64[0] = f;
  bits[0] += 1n;
  return f64[0];
}

/** The greatest double ≤ x: `now` rounded down, so an entry counts as expired only once it is. */
export function floorDouble(x: bigint): number {
  if (x < EXACT) return Number(x);
  const f = Number(x);
  if (BigInt(f) <= x) return f;
  f64[0] = f;
  bits[0] -= 1n;
  return f64[0];
}

/** Most a table is filled before it grows: linear probing stays short below it. */
export const LOAD = 0.75;

function fmix(h: number): number {
  h ^= h >>> 16;
  h = Math.imul(h, 0x85ebca6b);
  h ^= h >>> 13;
  h = Math.imul(h, 0xc2b2ae35);
  h ^= h >>> 16;
  return h >>> 0;
}

/**
 * Random per process: a sender picks its nonces freely, and with a public slot function it could
 * pick them to land in one probe chain and make every look-up walk it.
 */
function seeds(): [number, number] {
  const b = randomBytes(8);
  return [b.readUInt32LE(0), b.readUInt32LE(4)];
}

/** What the replay cache calls back with for each entry that leaves or that it lists. */
export type EntryVisitor = (sender: SenderHash, nonceLo: number, nonceHi: number, exp: number, owner: number) => void;

const KEY_WORDS = 5;
const MIN_SLOTS = 16;

/**
 * An open-addressing (linear probing) set of replay entries, each a fixed record: the sender
 * hash and the nonce (5 × u32: the key), its exp (f64), its owner's index (u32), and its place in
 * a min-heap by exp (i32), so expired entries leave in exp order, each in O(log n), with no sweep.
 * 36 bytes a slot, plus 4 a heap place; grown by doubling up to `fullSlots` (≤ 75 % full).
 */
export class EntryTable {
  size = 0;
  private slots: number;
  private keys: Uint32Array;
  /** 0 marks an empty slot: a live entry's exp is always after some now ≥ 0. */
  private exps: Float64Array;
  private owners: Uint32Array;
  private pos: Int32Array;
  private heap: Int32Array;
  private readonly seed = seeds();

  constructor(private readonly fullSlots: number) {
    this.slots = Math.max(MIN_SLOTS, Math.min(fullSlots, 1024));
    [this.keys, this.exps, this.owners, this.pos, this.heap] = EntryTable.arrays(this.slots);
  }

  /** Bytes the arrays take now. */
  get bytes(): number {
    return this.keys.byteLength + this.exps.byteLength + this.owners.byteLength + this.pos.byteLength + this.heap.byteLength;
  }

  /** Whether the entry (sender, nonce) is held. */
  has(s: SenderHash, lo: number, hi: number): boolean {
    const k = this.keys;
    for (let i = this.home(s[0], s[1], s[2], lo, hi); this.exps[i] !== 0; i = i + 1 === this.slots ? 0 : i + 1) {
      const w = i * KEY_WORDS;
      if (k[w] === s[0] && k[w + 1] === s[1] && k[w + 2] === s[2] && k[w + 3] === lo && k[w + 4] === hi) return true;
    }
    return false;
  }

  /** Adds an entry the caller found absent; `exp` > 0. */
  insert(s: SenderHash, lo: number, hi: number, exp: number, owner: number): void {
    if (this.size + 1 > this.slots * LOAD) this.grow();
    const i = this.place(s[0], s[1], s[2], lo, hi, exp, owner);
    const at = this.size++;
    this.heap[at] = i;
    this.pos[i] = at;
    this.siftUp(at);
  }

  /** Removes every entry whose exp is ≤ `now`, earliest first, telling `gone` of each. */
  expire(now: number, gone: EntryVisitor): void {
    while (this.size > 0 && this.exps[this.heap[0]] <= now) {
      const slot = this.heap[0];
      const w = slot * KEY_WORDS;
      const k = this.keys;
      gone([k[w], k[w + 1], k[w + 2]], k[w + 3], k[w + 4], this.exps[slot], this.owners[slot]);
      const last = this.heap[--this.size];
      if (this.size > 0) {
        this.heap[0] = last;
        this.pos[last] = 0;
        this.siftDown(0);
      }
      this.remove(slot);
    }
  }

  forEach(visit: EntryVisitor): void {
    const k = this.keys;
    for (let n = 0; n < this.size; n++) {
      const i = this.heap[n];
      const w = i * KEY_WORDS;
      visit([k[w], k[w + 1], k[w + 2]], k[w + 3], k[w + 4], this.exps[i], this.owners[i]);
    }
  }

  private static arrays(slots: number): [Uint32Array, Float64Array, Uint32Array, Int32Array, Int32Array] {
    return [new Uint32Array(slots * KEY_WORDS), new Float64Array(slots), new Uint32Array(slots), new Int32Array(slots), new Int32Array(Math.floor(slots * LOAD) + 1)];
  }

  private home(k0: number, k1: number, k2: number, lo: number, hi: number): number {
    let h = fmix(k0 ^ this.seed[0]);
    h = fmix(h ^ k1);
    h = fmix(h ^ k2 ^ this.seed[1]);
    h = fmix(h ^ lo);
    h = fmix(h ^ hi);
    return Math.floor((h / 4294967296) * this.slots);
  }

  private homeOf(i: number): number {
    const w = i * KEY_WORDS;
    const k = this.keys;
    return this.home(k[w], k[w + 1], k[w + 2], k[w + 3], k[w + 4]);
  }

  /** Writes the record into the first free slot of its probe chain; returns the slot. */
  private place(k0: number, k1: number, k2: number, lo: number, hi: number, exp: number, owner: number): number {
    let i = this.home(k0, k1, k2, lo, hi);
    while (this.exps[i] !== 0) i = i + 1 === this.slots ? 0 : i + 1;
    const w = i * KEY_WORDS;
    this.keys[w] = k0;
    this.keys[w + 1] = k1;
    this.keys[w + 2] = k2;
    this.keys[w + 3] = lo;
    this.keys[w + 4] = hi;
    this.exps[i] = exp;
    this.owners[i] = owner;
    return i;
  }

  /**
   * Empties a slot by backward shift (no tombstones, so chains never rot): each later entry of
   * the chain whose home does not lie after the hole moves into it, its heap place following.
   */
  private remove(hole: number): void {
    const n = this.slots;
    for (let j = hole + 1 === n ? 0 : hole + 1; this.exps[j] !== 0; j = j + 1 === n ? 0 : j + 1) {
      const h = this.homeOf(j);
      const stays = hole <= j ? hole < h && h <= j : hole < h || h <= j;
      if (stays) continue;
      this.keys.copyWithin(hole * KEY_WORDS, j * KEY_WORDS, (j + 1) * KEY_WORDS);
      this.exps[hole] = this.exps[j];
      this.owners[hole] = this.owners[j];
      this.pos[hole] = this.pos[j];
      this.heap[this.pos[hole]] = hole;
      hole = j;
    }
    this.exps[hole] = 0;
  }

  /** Doubles the slots (to `fullSlots` when that is nearer); the heap keeps its order, only its slots change. */
  private grow(): void {
    let next = this.slots * 2;
    if (next > this.fullSlots && this.fullSlots > this.slots) next = this.fullSlots;
    const [keys, exps, owners, heap] = [this.keys, this.exps, this.owners, this.heap];
    this.slots = next;
    [this.keys, this.exps, this.owners, this.pos, this.heap] = EntryTable.arrays(next);
    for (let n = 0; n < this.size; n++) {
      const old = heap[n];
      const w = old * KEY_WORDS;
      const i = this.place(keys[w], keys[w + 1], keys[w + 2], keys[w + 3], keys[w + 4], exps[old], owners[old]);
      this.heap[n] = i;
      this.pos[i] = n;
    }
  }

  private siftUp(at: number): void {
    const { heap, pos, exps } = this;
    const slot = heap[at];
    const exp = exps[slot];
    while (at > 0) {
      const up = (at - 1) >> 1;
      if (exps[heap[up]] <= exp) break;
      heap[at] = heap[up];
      pos[heap[at]] = at;
      at = up;
    }
    heap[at] = slot;
    pos[slot] = at;
  }

  private siftDown(at: number): void {
    const { heap, pos, exps } = this;
    const slot = heap[at];
    const exp = exps[slot];
    for (;;) {
      const l = 2 * at + 1;
      if (l >= this.size) break;
      const r = l + 1;
      const c = r < this.size && exps[heap[r]] < exps[heap[l]] ? r : l;
      if (exps[heap[c]] >= exp) break;
      heap[at] = heap[c];
      pos[heap[at]] = at;
      at = c;
    }
    heap[at] = slot;
    pos[slot] = at;
  }
}

/**
 * How many entries each sender holds, by sender hash: 3 × u32 of key and a u32 count a slot
 * (0 marks empty), grown by doubling as senders come; a sender leaves when its count is 0.
 * 16 bytes a slot.
 */
export class CountTable {
  private slots = 64;
  private keys = new Uint32Array(this.slots * 3);
  private counts = new Uint32Array(this.slots);
  private used = 0;
  private readonly seed = seeds();

  /** `fullSlots`: where doubling stops short (no more senders than entries), as EntryTable's. */
  constructor(private readonly fullSlots: number) {}

  get bytes(): number {
    return this.keys.byteLength + this.counts.byteLength;
  }

  get(s: SenderHash): number {
    const i = this.find(s);
    return i < 0 ? 0 : this.counts[i];
  }

  increment(s: SenderHash): void {
    const i = this.find(s);
    if (i >= 0) {
      this.counts[i]++;
      return;
    }
    if (this.used + 1 > this.slots * LOAD) this.grow();
    this.put(s[0], s[1], s[2], 1);
    this.used++;
  }

  decrement(s: SenderHash): void {
    const i = this.find(s);
    if (i < 0) return;
    if (--this.counts[i] === 0) this.remove(i);
  }

  private home(k0: number, k1: number, k2: number): number {
    const h = fmix(fmix(fmix(k0 ^ this.seed[0]) ^ k1) ^ k2 ^ this.seed[1]);
    return Math.floor((h / 4294967296) * this.slots);
  }

  private find(s: SenderHash): number {
    const k = this.keys;
    for (let i = this.home(s[0], s[1], s[2]); this.counts[i] !== 0; i = i + 1 === this.slots ? 0 : i + 1) {
      if (k[i * 3] === s[0] && k[i * 3 + 1] === s[1] && k[i * 3 + 2] === s[2]) return i;
    }
    return -1;
  }

  private put(k0: number, k1: number, k2: number, count: number): void {
    let i = this.home(k0, k1, k2);
    while (this.counts[i] !== 0) i = i + 1 === this.slots ? 0 : i + 1;
    this.keys[i * 3] = k0;
    this.keys[i * 3 + 1] = k1;
    this.keys[i * 3 + 2] = k2;
    this.counts[i] = count;
  }

  private remove(hole: number): void {
    const n = this.slots;
    const k = this.keys;
    this.used--;
    for (let j = hole + 1 === n ? 0 : hole + 1; this.counts[j] !== 0; j = j + 1 === n ? 0 : j + 1) {
      const h = this.home(k[j * 3], k[j * 3 + 1], k[j * 3 + 2]);
      const stays = hole <= j ? hole < h && h <= j : hole < h || h <= j;
      if (stays) continue;
      k.copyWithin(hole * 3, j * 3, j * 3 + 3);
      this.counts[hole] = this.counts[j];
      hole = j;
    }
    this.counts[hole] = 0;
  }

  private grow(): void {
    const [keys, counts, slots] = [this.keys, this.counts, this.slots];
    this.slots = slots * 2 > this.fullSlots && this.fullSlots > slots ? this.fullSlots : slots * 2;
    this.keys = new Uint32Array(this.slots * 3);
    this.counts = new Uint32Array(this.slots);
    for (let i = 0; i < slots; i++) if (counts[i] !== 0) this.put(keys[i * 3], keys[i * 3 + 1], keys[i * 3 + 2], counts[i]);
  }
}
