import { mergeMap, Subject, type Subscription } from 'rxjs';
import { DmsError } from './errors.js';
import { Fifo } from './fifo.js';

export interface MailboxOptions {
  /** Most items waiting or in progress; one more is refused, never dropped silently. */
  capacity: number;
  /** Items processed at once (handlers are async: a reply waits on signing, I/O…). */
  concurrency: number;
}

/** The sender of the node's own items, and their group: bounded by the capacity alone. */
export const OWN_SENDER = '';
/** What one group of senders (the peers of one host; any other sender alone) may hold of the capacity. */
export const GROUP_SHARE = 1 / 4;
/**
 * Past half the capacity, a group holding this many or more is refused: groups that each fill
 * their share cannot fill the rest between them, and a sender with a few items waiting, as an
 * honest one has, still gets in.
 */
export const LIGHT_GROUP = 16;

/** A group of senders: turns go round the groups, then round the senders within each. */
class Group<T> {
  /** Its senders with items waiting, in turn order. */
  readonly lanes = new Fifo<Lane<T>>();
  /** Its items waiting or in progress. */
  held = 0;

  constructor(readonly key: string) {}
}

/** One sender's items, in the order posted. */
class Lane<T> {
  readonly items = new Fifo<T>();
  /** Its items waiting or in progress. */
  held = 0;

  constructor(
    readonly sender: string,
    readonly group: Group<T>,
  ) {}
}

/**
 * A bounded RxJS mailbox. `post` either accepts an item, which is then processed exactly
 * once, or throws an `overloaded` DmsError the caller can report; it never drops one.
 *
 * Items are taken in turns: round the groups of senders (the peers of one host, a REST client,
 * the node itself), and within a group round its senders, each sender's items in the order
 * posted; one with thousands waiting has the next free slot no more often than one with a
 * single item. No group but the node's may hold more than GROUP_SHARE of the capacity, nor post
 * past half of it while it holds LIGHT_GROUP. First come first served, a peer flooding a slow
 * behavior (a plugin's call to an outside service) had every other caller wait behind its flood,
 * or, past the capacity, refused until it drained (test/network/mailbox-turns.test.ts).
 */
export class Mailbox<T> {
  /** One tick per item posted; each takes, when its turn to run comes, the item whose turn it is. */
  private readonly ticks = new Subject<void>();
  private readonly subscription: Subscription;
  private readonly lanes = new Map<string, Lane<T>>();
  private readonly groups = new Map<string, Group<T>>();
  /** Groups with items waiting, in turn order. */
  private readonly turns = new Fifo<Group<T>>();
  private pending = 0;
  private closed = false;
  private drained?: () => void;
  /** Most items one group other than the node's may hold. */
  readonly perGroup: number;

  constructor(
    readonly owner: string,
    readonly options: MailboxOptions,
    process: (item: T) => Promise<void> | void,
    onError: (error: unknown, item: T) => void,
  ) {
    this.perGroup = Math.max(1, Math.floor(options.capacity * GROUP_SHARE));
    this.subscription = this.ticks
      .pipe(
        mergeMap(async () => {
          const lane = this.nextLane();
          const item = lane.items.shift();
          if (lane.items.length > 0) lane.group.lanes.push(lane);
          if (lane.group.lanes.length > 0) this.turns.push(lane.group);
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

  /**
   * Accepts `item` from `sender`, one of `group` (by default a group of its own): a sender's
   * group is the one it had when it had nothing here.
   */
  post(item: T, sender: string = OWN_SENDER, group: string = sender): void {
    if (this.closed) throw new DmsError('unavailable', `actor ${this.owner} is not running`);
    const { capacity } = this.options;
    if (this.pending >= capacity) throw overloaded(`mailbox of actor ${this.owner} is full (${capacity} envelopes); retry later`);
    let lane = this.lanes.get(sender);
    const key = lane?.group.key ?? group;
    const held = (lane?.group ?? this.groups.get(key))?.held ?? 0;
    if (key !== OWN_SENDER && (held >= this.perGroup || (this.pending * 2 >= capacity && held >= LIGHT_GROUP))) {
      const whose = key === sender ? 'this sender' : 'the peers of this sender’s host';
      throw overloaded(
        held >= this.perGroup
          ? `mailbox of actor ${this.owner} holds ${held} envelopes from ${whose}, the most it may of ${capacity}; retry later`
          : `mailbox of actor ${this.owner} is half full (${this.pending} of ${capacity}) and holds ${held} envelopes from ${whose}; retry later`,
      );
    }
    if (!lane) {
      let g = this.groups.get(group);
      if (!g) this.groups.set(group, (g = new Group<T>(group)));
      this.lanes.set(sender, (lane = new Lane<T>(sender, g)));
    }
    if (lane.items.length === 0) {
      if (lane.group.lanes.length === 0) this.turns.push(lane.group);
      lane.group.lanes.push(lane);
    }
    lane.items.push(item);
    lane.held++;
    lane.group.held++;
    this.pending++;
    this.ticks.next();
  }

  /** The sender whose turn it is: of the group whose turn it is, the one whose turn it is there. */
  private nextLane(): Lane<T> {
    return this.turns.shift().lanes.shift();
  }

  private done(lane: Lane<T>): void {
    this.pending--;
    lane.group.held--;
    // Senders and groups with nothing here are forgotten: the maps hold only those with items.
    if (--lane.held === 0 && lane.items.length === 0) this.lanes.delete(lane.sender);
    if (lane.group.held === 0) this.groups.delete(lane.group.key);
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

const overloaded = (message: string) => new DmsError('overloaded', message, { retryAfter: 1 });
