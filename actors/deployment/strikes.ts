import { rememberNewest } from '../../runtime/bounded-map.js';

/**
 * Requesters that reserve and then do not start: a lease that runs out, or one released unstarted,
 * is a strike. Genuine requesters start at once (a start that fails is rare); a node that keeps
 * the share reserved without using it, lease after lease, is barred from reserving here for a while.
 */
export interface StrikeLimits {
  /** How long a strike counts. */
  windowMs: number;
  /** Strikes within the window that bar the requester until the oldest leaves it. */
  bar: number;
  /** Requesters tracked at most (the one struck longest ago goes first). */
  maxRequesters: number;
}

export class Strikes {
  /** Times of each requester's strikes, oldest first; insertion order of the map is last-struck order. */
  private readonly byRequester = new Map<string, number[]>();

  constructor(private readonly limits: StrikeLimits) {}

  /** Records a strike; an expired lease counts as `weight` strikes. */
  strike(requester: string, weight = 1, now = Date.now()): void {
    const times = this.live(requester, now) ?? [];
    for (let i = 0; i < weight; i++) times.push(now);
    rememberNewest(this.byRequester, requester, times, this.limits.maxRequesters);
  }

  /** Why `requester` may not reserve now, or null when it may. */
  barred(requester: string, now = Date.now()): string | null {
    const times = this.live(requester, now);
    if (!times || times.length < this.limits.bar) return null;
    const free = Math.ceil((times[times.length - this.limits.bar] + this.limits.windowMs - now) / 1000);
    return `your node let reservations here go unstarted (a lease ran out, or ${this.limits.bar} were released unstarted within ${this.limits.windowMs / 1000} s); it may reserve here again in ${free} s`;
  }

  private live(requester: string, now: number): number[] | undefined {
    const times = this.byRequester.get(requester);
    if (!times) return undefined;
    while (times.length && times[0] + this.limits.windowMs <= now) times.shift();
    if (times.length === 0) this.byRequester.delete(requester);
    return times.length ? times : undefined;
  }
}
