/**
 * The profiles this node's peers published (/public/describe), kept for the peers connected
 * now and asked again when a reader wants them and they are older than `freshMs`. Asking on
 * demand keeps a quiet network quiet, and a reader never waits longer than `waitMs`: a peer
 * that is slow to answer shows what it said last time.
 */
import { NodeProfile } from '../behaviors/discovery.js';
import { settledWithin } from '../runtime/deadline.js';
import { errorText } from '../runtime/errors.js';

export interface PeerProfilesOptions {
  /** Asks `peer` for its profile; resolves with the reply's payload, unchecked. */
  ask: (peer: string) => Promise<unknown>;
  /** Whether `peer` is connected now: an answer arriving after it left is not kept. */
  connected: (peer: string) => boolean;
  /** A profile younger than this is not asked for again (ms). */
  freshMs: number;
  /** Longest a reader waits for answers before taking what is known (ms). */
  waitMs: number;
  log: (fields: Record<string, unknown>, msg: string) => void;
}

interface Known {
  profile: NodeProfile | null;
  /** When the profile came (ms since the epoch). */
  seenAt: number | null;
  /** When it was last asked for, answered or not: a peer that cannot answer is not asked on every read. */
  askedAt: number;
  /** The turn (PeerProfiles.turn) of that question, and of the peer's last word that its profile changed. */
  question: number;
  changed?: number;
}

/** A question on its way to a peer, and the one asked once it is answered (PeerProfiles.refresh). */
interface Asking {
  answered: Promise<void>;
  next: Promise<void> | null;
}

export class PeerProfiles {
  // One entry per connected peer at most: forget() runs on every disconnect.
  private readonly known = new Map<string, Known>();
  /**
   * The question on its way to each peer, and the one that follows it for readers who came
   * while it was out (see refresh).
   */
  private readonly asking = new Map<string, Asking>();
  /** Orders questions and a peer's word that it changed: two in the same millisecond are still one after the other. */
  private turn = 0;

  constructor(private readonly opts: PeerProfilesOptions) {}

  /** The last profile of `peer` and when it came, if it ever answered. */
  get(peer: string): { profile: NodeProfile | null; last_seen: string | null } {
    const k = this.known.get(peer);
    return { profile: k?.profile ?? null, last_seen: k?.seenAt ? new Date(k.seenAt).toISOString() : null };
  }

  forget(peer: string): void {
    this.known.delete(peer);
  }

  /**
   * `peer` says its profile changed: the next reader asks it again, with a question asked after
   * now (one already on its way may bring the profile from before the change).
   */
  outdated(peer: string): void {
    const k = this.known.get(peer);
    if (k) k.changed = ++this.turn;
  }

  /**
   * Asks `peer` now, or shares the question already on its way. A reader about to act on the
   * answer (`anew`) cannot take that one: it may have been asked before the reader began, and be
   * answered with what the peer offered then (a share onboarded since would be refused from
   * it). It takes the question asked once that one is answered, which every such reader
   * arriving meanwhile shares: at most two questions to a peer, however many readers.
   */
  refresh(peer: string, anew = false): Promise<void> {
    const pending = this.asking.get(peer);
    if (!pending) return this.askNow(peer);
    if (!anew) return pending.answered;
    pending.next ??= pending.answered.then(() => this.refresh(peer));
    return pending.next;
  }

  /**
   * Refreshes the stale profiles among `peers`, and asks those of `now` anew however fresh (a
   * reader about to act on what one says), waiting at most `waitMs` for the answers.
   */
  async refreshStale(peers: string[], now: readonly string[] = []): Promise<void> {
    const at = Date.now();
    const asks = peers.flatMap((p) => {
      const k = this.known.get(p);
      if (now.includes(p) || (k?.changed !== undefined && k.question < k.changed)) return [this.refresh(p, true)];
      return at - (k?.askedAt ?? 0) >= this.opts.freshMs ? [this.refresh(p)] : [];
    });
    if (!asks.length) return;
    await settledWithin(Promise.all(asks), this.opts.waitMs, () => undefined);
  }

  private askNow(peer: string): Promise<void> {
    const entry: Asking = {
      // ask() never rejects; the entry goes before anyone waiting on it runs.
      answered: this.ask(peer).finally(() => {
        if (this.asking.get(peer) === entry) this.asking.delete(peer);
      }),
      next: null,
    };
    this.asking.set(peer, entry);
    return entry.answered;
  }

  private async ask(peer: string): Promise<void> {
    const askedAt = Date.now();
    const question = ++this.turn;
    let profile: NodeProfile | undefined;
    try {
      const parsed = NodeProfile.safeParse(await this.opts.ask(peer));
      if (parsed.success) profile = parsed.data;
      else this.opts.log({ peer, err: parsed.error.message.slice(0, 500) }, 'peer profile not recorded: not a valid profile');
    } catch (e) {
      this.opts.log({ peer, err: errorText(e) }, 'peer profile not recorded: no answer');
    }
    if (!this.opts.connected(peer)) return;
    const before = this.known.get(peer);
    const changed = before?.changed;
    this.known.set(peer, profile ? { profile, seenAt: Date.now(), askedAt, question, changed } : { profile: before?.profile ?? null, seenAt: before?.seenAt ?? null, askedAt, question, changed });
  }
}
