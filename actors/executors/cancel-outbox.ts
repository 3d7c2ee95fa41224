/**
 * Cancels a provider has not confirmed (README "Failures"). A run given up while its provider
 * was unreachable (cancelled then, or lost and placed elsewhere) went on there once the provider
 * was back, which picks its container up again: nobody told it of the cancel again, and the
 * run served on and held its share for good. Each is asked again, a round every
 * CANCEL_AGAIN_MS, until the provider answers; a provider that does not answer is not asked
 * about its other jobs in that round.
 */
import { rememberNewest } from '../../runtime/bounded-map.js';
import { DmsError, errorText } from '../../runtime/errors.js';
import type { Logger } from '../../runtime/log.js';

export const CANCEL_AGAIN_MS = 5_000;
/** Cancels kept waiting for their providers: the newest are kept. */
const MAX_WAITING = 1024;
/** A provider gone longer than this is not waited for any more. */
const GIVE_UP_MS = 24 * 3600_000;

interface Waiting {
  node: string;
  reason: string;
  since: number;
}

export class CancelOutbox {
  private readonly waiting = new Map<string, Waiting>();
  private timer: NodeJS.Timeout | undefined;
  private asking = false;

  constructor(
    /** Asks `node` to cancel the job; throws as the call does. */
    private readonly ask: (node: string, jobId: string, reason: string) => Promise<void>,
    private readonly log: Pick<Logger, 'info'>,
    private readonly everyMs = CANCEL_AGAIN_MS,
  ) {}

  add(jobId: string, node: string, reason: string): void {
    rememberNewest(this.waiting, jobId, { node, reason, since: Date.now() }, MAX_WAITING);
    this.timer ??= setInterval(() => void this.round(), this.everyMs).unref();
  }

  /** Started there again: the new run is not the one to cancel. */
  forget(jobId: string): void {
    this.waiting.delete(jobId);
  }

  close(): void {
    clearInterval(this.timer);
    this.timer = undefined;
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
          continue;
        }
        try {
          await this.ask(w.node, jobId, w.reason);
          this.log.info({ job: jobId, node: w.node }, 'cancel the provider missed confirmed');
        } catch (e) {
          // Ended there already, or unknown there: nothing runs to stop. Anything else: asked again.
          if (!(e instanceof DmsError && (e.kind === 'conflict' || e.kind === 'not_found'))) {
            silent.add(w.node);
            continue;
          }
          this.log.info({ job: jobId, node: w.node, err: errorText(e) }, 'cancel the provider missed: nothing runs there');
        }
        if (this.waiting.get(jobId) === w) this.waiting.delete(jobId);
      }
    } finally {
      this.asking = false;
      if (this.waiting.size === 0) this.close();
    }
  }
}
