import { setImmediate as nextTurn } from 'node:timers/promises';

/**
 * Sends what is handed to it together: the first item waits one turn of the event loop, and
 * whatever comes while a send is in flight goes in the next one. Many jobs move at once, and a
 * job's trip through the node's actors is paid for per envelope, not per item.
 */
export class Batcher<T> {
  private queue: T[] = [];
  /** Settles once the items now queued are sent. */
  private round: { sent: Promise<void>; resolve(): void; reject(e: unknown): void } | null = null;
  private running: Promise<void> | null = null;

  constructor(
    /** Sends one batch; a rejection is given to every item of the round. */
    private readonly send: (items: T[]) => Promise<unknown>,
    /** Most items one envelope carries. */
    private readonly max: number,
  ) {}

  /** Resolves once the batch carrying `item` is sent; the caller handles a failure. */
  add(item: T): Promise<void> {
    this.queue.push(item);
    if (!this.round) {
      let resolve!: () => void;
      let reject!: (e: unknown) => void;
      const sent = new Promise<void>((res, rej) => ((resolve = res), (reject = rej)));
      this.round = { sent, resolve, reject };
    }
    this.running ??= this.run();
    return this.round.sent;
  }

  /** Resolves once everything added so far is sent. */
  async drain(): Promise<void> {
    while (this.running) await this.running;
  }

  private async run(): Promise<void> {
    await nextTurn();
    while (this.round) {
      const { resolve, reject } = this.round;
      const items = this.queue;
      this.queue = [];
      this.round = null;
      try {
        for (let i = 0; i < items.length; i += this.max) await this.send(items.slice(i, i + this.max));
        resolve();
      } catch (e) {
        reject(e);
      }
    }
    this.running = null;
  }
}
