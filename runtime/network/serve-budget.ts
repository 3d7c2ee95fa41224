/**
 * The bytes of blocks the block server holds for the exchanges it serves, over the whole node
 * (README "Job outputs", Moving blocks): blocks read from disk and not yet sent, and blocks sent
 * into a stream whose reader has not taken them yet. Bounded per stream only, askers that never
 * read held 8 blocks read ahead and the one being sent each, 64 MiB per connection, and any
 * number of connections could ask so.
 *
 * A block is read only once its room is taken. Read-ahead takes room only while under half the
 * bound and never waits; the block a stream sends next waits for room under half the bound, or
 * under the whole bound when its peer holds nothing here: askers that never read fill at most
 * half the bound with their read-ahead, and every other peer still gets its blocks one at a time.
 */
import { DmsError } from '../errors.js';

interface Waiter {
  peer: string;
  bytes: number;
  granted: () => void;
}

export class ServeBudget {
  private heldBytes = 0;
  /** The most held at once since the node started. */
  peak = 0;
  private readonly byPeer = new Map<string, number>();
  private readonly waiting: Waiter[] = [];

  constructor(readonly limit: number) {}

  /** Bytes held now, over every exchange served. */
  get held(): number {
    return this.heldBytes;
  }

  /** Room for `bytes` read ahead for `peer`, if there is some now; never waits. */
  tryTake(peer: string, bytes: number): boolean {
    if (this.heldBytes + bytes > this.limit / 2) return false;
    this.add(peer, bytes);
    return true;
  }

  /** Room for the `bytes` a stream of `peer` sends next: resolves once taken, rejects when `signal` ends the wait. */
  take(peer: string, bytes: number, signal: AbortSignal): Promise<void> {
    signal.throwIfAborted();
    if (this.fits(peer, bytes)) {
      this.add(peer, bytes);
      return Promise.resolve();
    }
    return new Promise<void>((resolve, reject) => {
      const waiter: Waiter = {
        peer,
        bytes,
        granted: () => {
          signal.removeEventListener('abort', gone);
          resolve();
        },
      };
      const gone = () => {
        const i = this.waiting.indexOf(waiter);
        if (i >= 0) this.waiting.splice(i, 1);
        reject(signal.reason instanceof Error ? signal.reason : new DmsError('unavailable', 'exchange ended while waiting for room'));
      };
      signal.addEventListener('abort', gone, { once: true });
      this.waiting.push(waiter);
    });
  }

  /** Gives back `bytes` of `peer`'s, and the room to those waiting that it now fits, in the order they came. */
  give(peer: string, bytes: number): void {
    if (bytes <= 0) return;
    this.heldBytes -= bytes;
    const left = (this.byPeer.get(peer) ?? 0) - bytes;
    if (left > 0) this.byPeer.set(peer, left);
    else this.byPeer.delete(peer);
    for (let i = 0; i < this.waiting.length; ) {
      const w = this.waiting[i];
      if (!this.fits(w.peer, w.bytes)) {
        i++;
        continue;
      }
      this.waiting.splice(i, 1);
      this.add(w.peer, w.bytes);
      w.granted();
    }
  }

  private fits(peer: string, bytes: number): boolean {
    return this.heldBytes + bytes <= (this.byPeer.has(peer) ? this.limit / 2 : this.limit);
  }

  private add(peer: string, bytes: number): void {
    this.heldBytes += bytes;
    this.peak = Math.max(this.peak, this.heldBytes);
    this.byPeer.set(peer, (this.byPeer.get(peer) ?? 0) + bytes);
  }
}

/**
 * One served exchange's share of the budget: room taken for each block before it is read (as
 * large as a block may be, then what it was), moved to the stream when sent, and given back as
 * the stream's write buffer empties.
 */
export class ExchangeHold {
  private reserved = 0;
  private buffered = 0;
  private ended = false;

  constructor(
    private readonly budget: ServeBudget,
    private readonly peer: string,
    private readonly room: number,
  ) {}

  /** Room for one block read ahead, if there is some now. */
  tryReserve(): boolean {
    if (!this.budget.tryTake(this.peer, this.room)) return false;
    this.reserved += this.room;
    return true;
  }

  /** Room for the block to send next, waited for. */
  async reserve(signal: AbortSignal): Promise<void> {
    await this.budget.take(this.peer, this.room, signal);
    if (this.ended) this.budget.give(this.peer, this.room);
    else this.reserved += this.room;
  }

  /** The block read for one reservation was `bytes` long (0: none was there): the room it did not need goes back. */
  read(bytes: number): void {
    if (this.ended) return;
    this.reserved -= this.room - bytes;
    this.budget.give(this.peer, this.room - bytes);
  }

  /** A block of `bytes` went into the stream, which holds `queued` bytes unsent now. */
  sent(bytes: number, queued: number): void {
    if (this.ended) return;
    this.reserved -= bytes;
    this.buffered += bytes;
    this.flushed(queued);
  }

  /** The stream holds `queued` bytes unsent now: what of the blocks sent has left goes back. */
  flushed(queued: number): void {
    if (this.ended) return;
    const still = Math.min(this.buffered, queued);
    this.budget.give(this.peer, this.buffered - still);
    this.buffered = still;
  }

  /** The exchange is over: everything it held goes back. */
  end(): void {
    if (this.ended) return;
    this.ended = true;
    this.budget.give(this.peer, this.reserved + this.buffered);
    this.reserved = 0;
    this.buffered = 0;
  }
}
