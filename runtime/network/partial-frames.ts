/**
 * What inbound actor streams hold of frames not yet whole, bounded in time and over the node.
 * A stream's decoder keeps a frame's bytes until its last arrives (up to the envelope limit,
 * 32 streams a connection): streams holding all but the last byte of a 1 MiB frame were kept
 * for good (ten throwaway identities grew a node by 360 MB), and one byte every few seconds
 * kept such a frame "still arriving" for as long as the peer liked.
 *
 * So a frame begun is finished within FRAME_DEADLINE_MS of its first byte, and within
 * PARTIAL_FRAME_MS of its last, or its stream is reset; and what every stream holds together
 * stays within the node's budget: past it, the stream holding most for the peer holding most
 * is reset (an honest peer's frames cross in milliseconds, so it is the likeliest to be the
 * one keeping them).
 */

/** How long a frame begun may go without a byte. A 1 MiB envelope crosses loopback in milliseconds and a slow link in seconds. */
export const PARTIAL_FRAME_MS = 10_000;
/** How long a frame may take from its first byte to its last: 1 MiB at 35 KB/s. */
export const FRAME_DEADLINE_MS = 30_000;
/** Bytes of partial frames held over every stream by default: this, or four of the largest envelope. */
export const MIN_PARTIAL_BUDGET = 64 * 1024 * 1024;
/** The node's budget for a largest envelope of `maxEnvelopeBytes`. */
export const partialBudget = (maxEnvelopeBytes: number): number => Math.max(MIN_PARTIAL_BUDGET, 4 * maxEnvelopeBytes);

export type PartialEnd = 'stalled' | 'deadline' | 'budget';

/** Why an inbound frame was given up, as logged and as its stream's reset says. */
export const PARTIAL_ENDS: Record<PartialEnd, string> = {
  stalled: `not continued within ${PARTIAL_FRAME_MS} ms`,
  deadline: `not completed within ${FRAME_DEADLINE_MS} ms of its first byte`,
  budget: "given up: partial frames over every peer past the node's budget, this peer holding most",
};

/** One stream's part of the budget, and its clocks. */
export interface PartialFrame {
  /**
   * After each read: `held` bytes of a frame are not yet whole, and `began` says whether that
   * frame began in this read (none held before, or a frame was completed in it).
   */
  update(held: number, began: boolean): void;
  /** The stream closed: what it held is given back, its clocks stopped. */
  close(): void;
}

interface Entry {
  peer: string;
  held: number;
  end: (why: PartialEnd) => void;
}

export class PartialFrames {
  private total = 0;
  private readonly byPeer = new Map<string, { held: number; entries: Set<Entry> }>();

  constructor(
    readonly budget: number,
    private readonly gapMs = PARTIAL_FRAME_MS,
    private readonly deadlineMs = FRAME_DEADLINE_MS,
  ) {}

  /** Bytes of partial frames held now, over every stream. */
  get held(): number {
    return this.total;
  }

  /** Watches one stream of `peer`; `end` resets it, saying why (once). */
  open(peer: string, end: (why: PartialEnd) => void): PartialFrame {
    let gap: NodeJS.Timeout | undefined;
    let deadline: NodeJS.Timeout | undefined;
    let ended = false;
    const stopClocks = () => {
      clearTimeout(gap);
      clearTimeout(deadline);
      gap = deadline = undefined;
    };
    const entry: Entry = {
      peer,
      held: 0,
      end: (why) => {
        if (ended) return;
        ended = true;
        stopClocks();
        this.set(entry, 0);
        end(why);
      },
    };
    return {
      update: (held, began) => {
        if (ended) return;
        clearTimeout(gap);
        gap = undefined;
        if (held === 0 || began) {
          clearTimeout(deadline);
          deadline = undefined;
        }
        this.set(entry, held);
        if (held === 0) return;
        gap = setTimeout(() => entry.end('stalled'), this.gapMs).unref();
        deadline ??= setTimeout(() => entry.end('deadline'), this.deadlineMs).unref();
        this.keepWithinBudget(entry);
      },
      close: () => {
        ended = true;
        stopClocks();
        this.set(entry, 0);
      },
    };
  }

  private set(entry: Entry, held: number): void {
    const delta = held - entry.held;
    if (delta === 0) return;
    let peer = this.byPeer.get(entry.peer);
    if (!peer) this.byPeer.set(entry.peer, (peer = { held: 0, entries: new Set() }));
    entry.held = held;
    peer.held += delta;
    this.total += delta;
    if (held > 0) peer.entries.add(entry);
    else peer.entries.delete(entry);
    if (peer.entries.size === 0) this.byPeer.delete(entry.peer);
  }

  /** Past the budget, the largest holding of the peer holding most goes, until within it. */
  private keepWithinBudget(latest: Entry): void {
    while (this.total > this.budget) {
      let top: { held: number; entries: Set<Entry> } | undefined = this.byPeer.get(latest.peer);
      for (const p of this.byPeer.values()) if (!top || p.held > top.held) top = p;
      let victim: Entry | undefined;
      for (const e of top!.entries) if (!victim || e.held > victim.held) victim = e;
      victim!.end('budget');
    }
  }
}
