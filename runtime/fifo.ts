/**
 * A first-in first-out queue: an array read from a head index, compacted once the part already
 * read is at least half of it, so a take never moves what is left (an array's `shift` may move
 * all of it, every time).
 */
export class Fifo<T> {
  private items: (T | undefined)[] = [];
  private head = 0;

  get length(): number {
    return this.items.length - this.head;
  }

  push(item: T): void {
    this.items.push(item);
  }

  /** The oldest item, taken out; the queue must not be empty. */
  shift(): T {
    const item = this.items[this.head] as T;
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
