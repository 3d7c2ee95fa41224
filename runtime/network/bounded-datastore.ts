/**
 * The libp2p host's datastore (its peer store, the DHT's provider records and values), held in
 * memory within a bound. libp2p's own MemoryDatastore holds whatever it is given: any peer may
 * send the DHT `ADD_PROVIDER` for CIDs it makes up, and one peer's 100,000 of them, sent in 13 s
 * over one stream, grew a node from 98 to 413 MB, kept for the records' validity (48 h).
 *
 * Each entry has an owner: a provider record the peer it names, anything else the first two
 * parts of its key (a peer's record in the peer store is its own). One owner holds at most
 * MAX_PER_OWNER entries, its oldest going for a new one (the node's own provider records, one
 * per DAG it holds, only within the whole bound); past MAX_ENTRIES in all, the oldest entry of
 * the owner holding most goes. A peer announcing made-up CIDs therefore displaces only its own
 * records, and a crowd of identities the entries of whoever holds most, not an honest
 * provider's few.
 *
 * A CID's provider records are also indexed by the CID: libp2p's query for them (a prefix)
 * walked every entry held, 42 ms for each `GET_PROVIDERS` a peer asked of a full store, and a
 * peer may ask on 32 streams at once.
 */
import { MemoryDatastore } from 'datastore-core/memory';
import { Key, type Pair, type Query } from 'interface-datastore';

/** Entries held in all. */
export const MAX_ENTRIES = 65_536;
/** Entries one owner holds: far more provider records than a node announces (one per DAG it holds). */
export const MAX_PER_OWNER = 4_096;

const PROVIDER_PREFIX = '/dht/provider/';

/** Whose entry `key` is: the provider a provider record names, else the first two parts of its key (`/peers/<id>`). */
export function ownerOf(key: string): string {
  if (key.startsWith(PROVIDER_PREFIX)) return `provider:${key.slice(key.lastIndexOf('/') + 1)}`;
  return key.split('/', 3).join('/');
}

/** Whether `path` is one CID's provider records (`/dht/provider/<cid>`). */
const isCidPath = (path: string): boolean => path.length > PROVIDER_PREFIX.length && path.startsWith(PROVIDER_PREFIX) && !path.includes('/', PROVIDER_PREFIX.length);

/** The CID's path a provider record's key begins with (`/dht/provider/<cid>` of `/dht/provider/<cid>/<peer>`); undefined for any other key. */
function cidOf(key: string): string | undefined {
  const path = key.slice(0, key.lastIndexOf('/'));
  return isCidPath(path) ? path : undefined;
}

export class BoundedDatastore extends MemoryDatastore {
  /** Each owner's keys, oldest first. */
  private readonly owners = new Map<string, Set<string>>();
  /** Owners by how many entries each holds, for the one holding most without a scan. */
  private readonly bySize = new Map<number, Set<string>>();
  private largest = 0;
  private count = 0;
  /** The owner of the node's own provider records, if the node is named. */
  private readonly self: string | undefined;
  /** Provider records by the CID they are for (`/dht/provider/<cid>`). */
  private readonly byCid = new Map<string, Set<string>>();

  /** `self`: the node's own peer id, whose provider records (one per DAG it holds) have no share but the whole bound. */
  constructor(
    private readonly maxEntries = MAX_ENTRIES,
    private readonly maxPerOwner = MAX_PER_OWNER,
    self?: string,
  ) {
    super();
    this.self = self === undefined ? undefined : `provider:${self}`;
  }

  /** Entries held now. */
  get size(): number {
    return this.count;
  }

  override put(key: Key, val: Uint8Array, options?: Parameters<MemoryDatastore['put']>[2]): ReturnType<MemoryDatastore['put']> {
    const k = key.toString();
    const owner = ownerOf(k);
    let keys = this.owners.get(owner);
    if (keys?.has(k)) {
      // Written again: the newest of its owner's.
      keys.delete(k);
      keys.add(k);
    } else {
      if (keys && keys.size >= this.maxPerOwner && owner !== this.self) this.evictOldest(owner);
      else if (this.count >= this.maxEntries) this.evictOldest(this.holdingMost());
      keys = this.owners.get(owner);
      if (!keys) this.owners.set(owner, (keys = new Set()));
      this.resize(owner, keys.size, keys.size + 1);
      keys.add(k);
      this.count++;
      const cid = cidOf(k);
      if (cid !== undefined) {
        const records = this.byCid.get(cid);
        if (records) records.add(k);
        else this.byCid.set(cid, new Set([k]));
      }
    }
    return super.put(key, val, options);
  }

  /** A CID's provider records from the index; any other query as MemoryDatastore answers it, walking every entry. */
  override query(q: Query, options?: Parameters<MemoryDatastore['query']>[1]): ReturnType<MemoryDatastore['query']> {
    const path = q.prefix?.replace(/\/$/, '');
    const plain = q.filters === undefined && q.orders === undefined && q.offset === undefined && q.limit === undefined;
    return path !== undefined && plain && isCidPath(path) ? this.recordsOf(path) : super.query(q, options);
  }

  private *recordsOf(cid: string): Generator<Pair> {
    for (const k of [...(this.byCid.get(cid) ?? [])]) {
      const key = new Key(k);
      // Deleted while the caller went through the records before it.
      if (this.has(key)) yield { key, value: this.get(key) as Uint8Array };
    }
  }

  override delete(key: Key, options?: Parameters<MemoryDatastore['delete']>[1]): void {
    this.forget(key.toString());
    super.delete(key, options);
  }

  private forget(k: string): void {
    const owner = ownerOf(k);
    const keys = this.owners.get(owner);
    if (!keys?.delete(k)) return;
    this.count--;
    const cid = cidOf(k);
    const records = cid === undefined ? undefined : this.byCid.get(cid);
    if (records?.delete(k) && records.size === 0) this.byCid.delete(cid!);
    this.resize(owner, keys.size + 1, keys.size);
    if (keys.size === 0) this.owners.delete(owner);
  }

  private evictOldest(owner: string): void {
    const oldest = this.owners.get(owner)?.values().next().value;
    if (oldest === undefined) return;
    this.forget(oldest);
    super.delete(new Key(oldest));
  }

  private holdingMost(): string {
    return this.bySize.get(this.largest)!.values().next().value!;
  }

  private resize(owner: string, from: number, to: number): void {
    if (from > 0) {
      const set = this.bySize.get(from)!;
      set.delete(owner);
      if (set.size === 0) this.bySize.delete(from);
    }
    if (to > 0) {
      const set = this.bySize.get(to);
      if (set) set.add(owner);
      else this.bySize.set(to, new Set([owner]));
    }
    if (to > this.largest) this.largest = to;
    while (this.largest > 0 && !this.bySize.has(this.largest)) this.largest--;
  }
}
