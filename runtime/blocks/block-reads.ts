/**
 * How the block store reads a block's file: on the event loop while the disk answers from
 * memory, through libuv's thread pool for a while once a read had to go to the disk.
 *
 * A read from the page cache is cheaper on the event loop than the promise API's trips through
 * the pool (c3701ed: with a look-up's and a read's trips a 128 MiB fetch took 4.9 s, without
 * them 1.9 s). But a read the disk must serve holds the event loop as long as the disk takes:
 * on a small device's SD card milliseconds to tens of them a block, and any peer may ask for
 * any block held here (blocks are public by CID), so a peer asking for blocks nobody read
 * lately could hold a node's event loop nearly all the time.
 *
 * Whether a read went to the disk is what the kernel counted for the process meanwhile
 * (getrusage's ru_inblock, `process.resourceUsage().fsRead`: 512-byte units read from the
 * device, nothing for the page cache), not how long it took: on two busy cores a read from
 * memory is often preempted past any threshold of time (8 ms sent two reads in three of a
 * bench's fetch to the pool). One read that went to the disk sends the reads of the next
 * POOLED_FOR_MS through the pool; the first after that tries the event loop again.
 */
import { readFileSync } from 'node:fs';
import { readFile } from 'node:fs/promises';

/** How long reads go through the pool after one went to the disk. */
export const POOLED_FOR_MS = 2_000;

export interface BlockReadOptions {
  pooledForMs?: number;
  /** Milliseconds on a monotonic clock (performance.now by default). */
  now?: () => number;
  /** What the process has read from devices so far, in any unit (process.resourceUsage().fsRead by default). */
  deviceReads?: () => number;
}

export class BlockReads {
  /** Reads since the store opened: on the event loop (`direct`) and through the pool (`pooled`). */
  readonly counts = { direct: 0, pooled: 0 };
  private pooledUntil = Number.NEGATIVE_INFINITY;
  private readonly pooledForMs: number;
  private readonly now: () => number;
  private readonly deviceReads: () => number;

  constructor(opts: BlockReadOptions = {}) {
    this.pooledForMs = opts.pooledForMs ?? POOLED_FOR_MS;
    this.now = opts.now ?? (() => performance.now());
    this.deviceReads = opts.deviceReads ?? (() => process.resourceUsage().fsRead);
  }

  /** Whether the next read goes through the pool. */
  get pooled(): boolean {
    return this.now() < this.pooledUntil;
  }

  /** The file's bytes; rejects as the file system does (ENOENT for a file not there). */
  async read(file: string): Promise<Uint8Array> {
    if (this.pooled) {
      this.counts.pooled++;
      return readFile(file);
    }
    this.counts.direct++;
    const before = this.deviceReads();
    const bytes = readFileSync(file);
    // Another thread's read in the meantime counts too: at worst a while through the pool.
    if (this.deviceReads() > before) this.pooledUntil = this.now() + this.pooledForMs;
    return bytes;
  }
}
