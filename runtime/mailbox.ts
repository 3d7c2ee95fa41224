import { mergeMap, Subject, type Subscription } from 'rxjs';
import { DmsError } from './errors.js';

export interface MailboxOptions {
  /** Most items waiting or in progress; one more is refused, never dropped silently. */
  capacity: number;
  /** Items processed at once (handlers are async: a reply waits on signing, I/O…). */
  concurrency: number;
}

/** The sender of the node's own items: bounded by the capacity alone. */
export const OWN_SENDER = '';
/** One other sender may hold at most this share of the capacity: the rest stays open to everyone else. */
export const SENDER_SHARE = 1 / 4;

/** One sender's items, oldest first (an array read from `head`, compacted as it empties). */
class Lane<T> {
  private items: (T | undefined)[] = [];
  private head = 0;
  /** Its items waiting or in progress. */
  held = 0;

  constructor(readonly sender: string) {}

  get waiting(): number {
    return this.items.length - this.head;
  }

  push(item: T): void {
    this.items.push(item);
  }

  shift(): T {
    const item = this.items[this.head]!;
    this.items[this.head++] = undefined;
    if (this.head === this.items.length) {
      this.items = [];
      this.head = 0;
    } else if (this.head >= 1024 && this.head * 2 >= this.items.length) {
      this.items = this.items.slice(this.head);
      this.head = 0;
    }
    return item;
  }
}

/**
 * A bounded RxJS mailbox. `post` either accepts an item, which is then processed exactly
 * once, or throws an `overloaded` DmsError the caller can report; it never drops one.
 *
 * Items are taken in turns by sender (a peer, a REST client, the node itself), each sender's in
 * the order posted: one sender with thousands waiting has the next free slot no more often than
 * any other with one. And no sender but the node may hold more than SENDER_SHARE of the capacity.
 * First come first served, a peer flooding a slow behavior (a plugin's call to an outside
 * service) filled the mailbox, and every other caller, the operator's own included, was refused
 * until it drained (test/network/mailbox-turns.test.ts).
 */
export class Mailbox<T> {
  /** One tick per item posted; each takes, when its turn to run comes, the item whose turn it is. */
  private readonly ticks = new Subject<void>();
  private readonly subscription: Subscription;
  private readonly lanes = new Map<string, Lane<T>>();
  /** Lanes with items waiting, in turn order (an array read from `turn`). */
  private turns: Lane<T>[] = [];
  private turn = 0;
  private pending = 0;
  private closed = false;
  private drained?: () => void;
  /** Most items one sender other than the node may hold. */
  readonly perSender: number;

  constructor(
    readonly owner: string,
    readonly options: MailboxOptions,
    process: (item: T) => Promise<void> | void,
    onError: (error: unknown, item: T) => void,
  ) {
    this.perSender = Math.max(1, Math.floor(options.capacity * SENDER_SHARE));
    this.subscription = this.ticks
      .pipe(
        mergeMap(async () => {
          const lane = this.nextLane();
          const item = lane.shift();
          try {
            await process(item);
          } catch (e) {
            onError(e, item);
          } finally {
            this.done(lane);
          }
        }, options.concurrency),
      )
      .subscribe();
  }

  /** Items accepted and not yet processed. */
  get size(): number {
    return this.pending;
  }

  post(item: T, sender: string = OWN_SENDER): void {
    if (this.closed) throw new DmsError('unavailable', `actor ${this.owner} is not running`);
    if (this.pending >= this.options.capacity) {
      throw new DmsError('overloaded', `mailbox of actor ${this.owner} is full (${this.options.capacity} envelopes); retry later`, {
        retryAfter: 1,
      });
    }
    let lane = this.lanes.get(sender);
    if (lane && sender !== OWN_SENDER && lane.held >= this.perSender) {
      throw new DmsError('overloaded', `mailbox of actor ${this.owner} holds ${lane.held} envelopes from this sender, the most one sender may of its ${this.options.capacity}; retry later`, {
        retryAfter: 1,
      });
    }
    if (!lane) {
      lane = new Lane<T>(sender);
      this.lanes.set(sender, lane);
    }
    if (lane.waiting === 0) this.turns.push(lane);
    lane.push(item);
    lane.held++;
    this.pending++;
    this.ticks.next();
  }

  /** The lane whose turn it is; it goes to the back of the turns while it has more waiting. */
  private nextLane(): Lane<T> {
    const lane = this.turns[this.turn]!;
    this.turns[this.turn++] = undefined as unknown as Lane<T>;
    if (lane.waiting > 1) this.turns.push(lane);
    if (this.turn === this.turns.length) {
      this.turns = [];
      this.turn = 0;
    } else if (this.turn >= 1024 && this.turn * 2 >= this.turns.length) {
      this.turns = this.turns.slice(this.turn);
      this.turn = 0;
    }
    return lane;
  }

  private done(lane: Lane<T>): void {
    this.pending--;
    // A sender with nothing here is forgotten: the map holds only senders with items.
    if (--lane.held === 0 && lane.waiting === 0) this.lanes.delete(lane.sender);
    if (this.closed && this.pending === 0) this.drained?.();
  }

  /** Stops accepting and resolves once everything accepted has been processed. */
  close(): Promise<void> {
    this.closed = true;
    const done = this.pending === 0 ? Promise.resolve() : new Promise<void>((resolve) => (this.drained = resolve));
    return done.then(() => {
      this.ticks.complete();
      this.subscription.unsubscribe();
    });
  }
}
