import { mergeMap, Subject, type Subscription } from 'rxjs';
import { DmsError } from './errors.js';

export interface MailboxOptions {
  /** Most items waiting or in progress; one more is refused, never dropped silently. */
  capacity: number;
  /** Items processed at once (handlers are async: a reply waits on signing, I/O…). */
  concurrency: number;
}

/**
 * A bounded RxJS mailbox. `post` either accepts an item, which is then processed exactly
 * once, or throws an `overloaded` DmsError the caller can report; it never drops one.
 */
export class Mailbox<T> {
  private readonly queue = new Subject<T>();
  private readonly subscription: Subscription;
  private pending = 0;
  private closed = false;
  private drained?: () => void;

  constructor(
    readonly owner: string,
    readonly options: MailboxOptions,
    process: (item: T) => Promise<void> | void,
    onError: (error: unknown, item: T) => void,
  ) {
    this.subscription = this.queue
      .pipe(
        mergeMap(async (item) => {
          try {
            await process(item);
          } catch (e) {
            onError(e, item);
          } finally {
            this.pending--;
            if (this.closed && this.pending === 0) this.drained?.();
          }
        }, options.concurrency),
      )
      .subscribe();
  }

  /** Items accepted and not yet processed. */
  get size(): number {
    return this.pending;
  }

  post(item: T): void {
    if (this.closed) throw new DmsError('unavailable', `actor ${this.owner} is not running`);
    if (this.pending >= this.options.capacity) {
      throw new DmsError('overloaded', `mailbox of actor ${this.owner} is full (${this.options.capacity} envelopes); retry later`, {
        retryAfter: 1,
      });
    }
    this.pending++;
    this.queue.next(item);
  }

  /** Stops accepting and resolves once everything accepted has been processed. */
  close(): Promise<void> {
    this.closed = true;
    const done = this.pending === 0 ? Promise.resolve() : new Promise<void>((resolve) => (this.drained = resolve));
    return done.then(() => {
      this.queue.complete();
      this.subscription.unsubscribe();
    });
  }
}
