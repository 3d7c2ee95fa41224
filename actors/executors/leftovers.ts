/**
 * Containers the engine did not remove when asked (a start that failed half-way, a stop it never
 * answered, a clean-up it refused): removed again while the node runs. Before, they waited for
 * the node's next start (its reconcile), holding the engine's memory and disk for as long as
 * the node ran, and a job's network with them. Each is asked again after `firstMs`, then at
 * twice the wait while the engine keeps refusing, up to `maxMs`; the newest MAX_LEFTOVERS are kept.
 */
import { rememberNewest } from '../../runtime/bounded-map.js';
import { errorText } from '../../runtime/errors.js';
import type { Logger } from '../../runtime/log.js';

/** Containers kept waiting for their removal: the newest are kept, the next start-up's reconcile finds the rest. */
export const MAX_LEFTOVERS = 1024;
export const LEFTOVER_RETRY = { firstMs: 30_000, maxMs: 600_000 };

export class Leftovers {
  /** Job ids by container id, oldest first. */
  private readonly owed = new Map<string, string>();
  private timer: NodeJS.Timeout | undefined;
  private waitMs: number;
  private sweeping = false;
  private closed = false;

  constructor(
    /** Removes the container and what its job held (its network); throws when the engine refuses. */
    private readonly remove: (containerId: string, jobId: string) => Promise<void>,
    private readonly log: Pick<Logger, 'info' | 'warn'> | undefined,
    private readonly retry: { firstMs: number; maxMs: number } = LEFTOVER_RETRY,
  ) {
    this.waitMs = retry.firstMs;
  }

  /** The container `containerId` of job `jobId` was not removed: it is asked again later. */
  owe(containerId: string, jobId: string): void {
    if (this.closed) return;
    rememberNewest(this.owed, containerId, jobId, MAX_LEFTOVERS);
    this.schedule();
  }

  /** Removed meanwhile by someone else's call (a clean-up, a reconcile): nothing owed any more. */
  paid(containerId: string): void {
    this.owed.delete(containerId);
  }

  /** Container ids still owed, oldest first. */
  list(): string[] {
    return [...this.owed.keys()];
  }

  close(): void {
    this.closed = true;
    clearTimeout(this.timer);
    this.timer = undefined;
  }

  private schedule(): void {
    if (this.timer || this.sweeping || this.closed || this.owed.size === 0) return;
    this.timer = setTimeout(() => void this.sweep(), this.waitMs);
    this.timer.unref();
  }

  private async sweep(): Promise<void> {
    this.timer = undefined;
    this.sweeping = true;
    let removed = 0;
    let refusal: string | null = null;
    try {
      for (const [containerId, jobId] of [...this.owed]) {
        if (this.closed) return;
        try {
          await this.remove(containerId, jobId);
          this.owed.delete(containerId);
          removed++;
        } catch (e) {
          refusal = errorText(e);
          // An engine that does not answer one will not answer the next: the rest wait for the next round.
          break;
        }
      }
    } finally {
      this.sweeping = false;
    }
    if (removed > 0) this.log?.info({ removed, left: this.owed.size }, 'containers the engine had not removed are removed now');
    if (refusal !== null) this.log?.warn({ left: this.owed.size, err: refusal }, 'containers the engine did not remove are asked again later');
    this.waitMs = refusal === null ? this.retry.firstMs : Math.min(this.waitMs * 2, this.retry.maxMs);
    this.schedule();
  }
}
