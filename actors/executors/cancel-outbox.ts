/**
 * Cancels a provider has not confirmed (README "Failures"). A run given up while its provider
 * was unreachable (cancelled then, or lost and placed elsewhere) went on there once the provider
 * was back, which picks its container up again: nobody told it of the cancel again, and the
 * run served on and held its share for good. Each is asked again, a round every
 * CANCEL_AGAIN_MS, until the provider answers; a provider that does not answer is not asked
 * about its other jobs in that round.
 *
 * Each is stored before the cancel is answered (storage/cancels.ts), and the outbox is filled
 * again from storage when the node starts: kept in memory only, a requester restarted (or
 * killed) before the provider was back forgot a cancel it had answered, and the run went on
 * there for good (test/multinode/cancel-after-restart.test.ts). A node shut down cleanly keeps
 * them too, for its next start. The bounds hold for the stored ones: the newest MAX_WAITING,
 * none older than GIVE_UP_MS, counted from when the run was given up, not from the restart.
 */
import { rememberNewest } from '../../runtime/bounded-map.js';
import { DmsError, errorText } from '../../runtime/errors.js';
import type { Logger } from '../../runtime/log.js';
import type { StoredCancel, WaitingCancel } from '../../storage/cancels.js';

export const CANCEL_AGAIN_MS = 5_000;
/** Cancels kept waiting for their providers: the newest are kept. */
const MAX_WAITING = 1024;
/** A provider gone longer than this is not waited for any more. */
const GIVE_UP_MS = 24 * 3600_000;

interface Waiting {
  node: string;
  reason: string;
  since: number;
  /** Its row's write: a row is removed only once it is there, or the removal could come first. */
  stored?: Promise<void>;
}

/** Where the waiting cancels outlive the process (storage/cancels.ts). */
export interface CancelStore {
  list(): Promise<StoredCancel[]>;
  put(cancel: WaitingCancel, keep: number): Promise<void>;
  remove(jobId: string, since?: number): Promise<void>;
}

export class CancelOutbox {
  private readonly waiting = new Map<string, Waiting>();
  private timer: NodeJS.Timeout | undefined;
  private asking = false;
  /** The stored cancels picked up (open). */
  private loaded: Promise<void> = Promise.resolve();

  constructor(
    /** Asks `node` to cancel the job's run given up `givenUpMs` ago; throws as the call does. */
    private readonly ask: (node: string, jobId: string, reason: string, givenUpMs: number) => Promise<void>,
    private readonly log: Pick<Logger, 'info' | 'warn'>,
    /** Without, the cancels are kept in memory only. */
    private readonly store?: CancelStore,
    private readonly everyMs = CANCEL_AGAIN_MS,
  ) {}

  /**
   * Picks up the cancels an earlier process of this node stored. Those of a job unfinished on
   * that same node again, or past the bounds, go; cancels added meanwhile stay the newest. The
   * node need not wait for it to serve: a forget() waits for it instead, so a row read after a
   * start forgot its job cannot bring the cancel back for the new run.
   */
  open(): Promise<void> {
    this.loaded = this.load();
    return this.loaded;
  }

  private async load(): Promise<void> {
    if (!this.store) return;
    let rows: StoredCancel[];
    try {
      rows = await this.store.list();
    } catch (e) {
      // The node serves on without them: what they would stop runs on, as it did before they were stored.
      this.log.warn({ err: errorText(e) }, 'cancels the providers missed not read from storage');
      return;
    }
    const now = Date.now();
    const live = [...this.waiting];
    this.waiting.clear();
    let dropped = 0;
    for (const [i, row] of rows.entries()) {
      if (row.placed_again || now - row.since > GIVE_UP_MS || i < rows.length - MAX_WAITING) {
        dropped++;
        void this.unstore(row.job_id, row);
        continue;
      }
      this.waiting.set(row.job_id, { node: row.node, reason: row.reason, since: row.since });
    }
    for (const [jobId, w] of live) rememberNewest(this.waiting, jobId, w, MAX_WAITING);
    if (rows.length > 0) this.log.info({ waiting: rows.length - dropped, dropped }, 'cancels the providers missed picked up again');
    if (this.waiting.size > 0) this.schedule();
  }

  /** Resolves once the cancel is stored: before it is answered, so a restart does not forget it. */
  async add(jobId: string, node: string, reason: string): Promise<void> {
    const w: Waiting = { node, reason, since: Date.now() };
    rememberNewest(this.waiting, jobId, w, MAX_WAITING);
    this.schedule();
    if (!this.store) return;
    w.stored = this.store
      .put({ job_id: jobId, node, reason, since: w.since }, MAX_WAITING)
      .catch((e: unknown) => this.log.warn({ job: jobId, node, err: errorText(e) }, 'cancel the provider missed not stored: a restart of this node forgets it'));
    await w.stored;
  }

  /** Started there again: the new run is not the one to cancel. Resolves once its row is gone too. */
  async forget(jobId: string): Promise<void> {
    await this.loaded;
    const w = this.waiting.get(jobId);
    if (!w) return;
    this.waiting.delete(jobId);
    await this.unstore(jobId, w);
  }

  /** Stops asking; the stored cancels are asked again by the node's next process. */
  close(): void {
    clearInterval(this.timer);
    this.timer = undefined;
  }

  private schedule(): void {
    this.timer ??= setInterval(() => void this.round(), this.everyMs).unref();
  }

  /** Removes the row of `w` (not a newer one of the job). A row left is asked again after a restart, and answered. */
  private async unstore(jobId: string, w: Pick<Waiting, 'since' | 'stored'>): Promise<void> {
    if (!this.store) return;
    await w.stored;
    await this.store.remove(jobId, w.since).catch((e: unknown) => this.log.info({ job: jobId, err: errorText(e) }, 'cancel the provider missed not removed from storage'));
  }

  private async round(): Promise<void> {
    if (this.asking) return;
    this.asking = true;
    const silent = new Set<string>();
    try {
      for (const [jobId, w] of [...this.waiting]) {
        if (this.waiting.get(jobId) !== w || silent.has(w.node)) continue;
        if (Date.now() - w.since > GIVE_UP_MS) {
          this.waiting.delete(jobId);
          void this.unstore(jobId, w);
          continue;
        }
        try {
          // Its age goes with it: asked while the job is placed there again, it stops no newer run.
          await this.ask(w.node, jobId, w.reason, Math.max(0, Date.now() - w.since));
          this.log.info({ job: jobId, node: w.node }, 'cancel the provider missed confirmed');
        } catch (e) {
          // Ended there already, or unknown there: nothing runs to stop. Anything else: asked again.
          if (!(e instanceof DmsError && (e.kind === 'conflict' || e.kind === 'not_found'))) {
            silent.add(w.node);
            continue;
          }
          this.log.info({ job: jobId, node: w.node, err: errorText(e) }, 'cancel the provider missed: nothing runs there');
        }
        if (this.waiting.get(jobId) === w) {
          this.waiting.delete(jobId);
          void this.unstore(jobId, w);
        }
      }
    } finally {
      this.asking = false;
      if (this.waiting.size === 0) this.close();
    }
  }
}
