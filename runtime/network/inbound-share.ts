/**
 * Inbound connections shared between the addresses that dial the node. libp2p alone keeps 10
 * handshakes pending over every address, and refuses each inbound connection past its maximum
 * before it knows who dials: one address opening sockets that never begin Noise, or connecting
 * throwaway identities (they cost nothing), kept every other peer out for as long as it went on.
 *
 * Here one address (an IPv4 address, an IPv6 /64: what one host or subscriber holds) has at
 * most PENDING_PER_HOST handshakes pending; past MAX_PENDING over all, a new one takes the place
 * of the oldest from the address pending the most, unless its own pends the most. Past the
 * node's maximum of connections, a new inbound connection takes the place of the newest inbound
 * one from the address that holds the most, unless its own address holds as many, when it is the
 * one closed. Connections the node dialled are not taken: it chose those peers.
 */
import type { Connection, MultiaddrConnection } from '@libp2p/interface';
import { getNetConfig, isNetworkAddress } from '@libp2p/utils';
import type { Multiaddr } from '@multiformats/multiaddr';
import { hostPrefix } from './host-prefix.js';

/** Handshakes pending at once over every address (libp2p's default is 10). */
export const MAX_PENDING = 64;
/**
 * Handshakes pending at once from one address. libp2p takes 5 new connections a second from
 * one address: an honest peer's handshakes end well within that, so only sockets held open
 * without a handshake meet this bound.
 */
export const PENDING_PER_HOST = 8;
/**
 * Connections, and handshakes, libp2p may hold above the bounds kept here, for as long as a new
 * one's place is being made: it refuses what comes past them before anyone here sees it.
 */
export const HEADROOM = MAX_PENDING;

/** The part of an address one host or subscriber holds (host-prefix.ts); undefined for a non-IP address. */
export function hostOf(addr: Multiaddr): string | undefined {
  return isNetworkAddress(addr) ? hostPrefix(getNetConfig(addr).host) : undefined;
}

export class InboundShare {
  /** Handshakes pending, by address, each address's oldest first. */
  private readonly pending = new Map<string, Set<MultiaddrConnection>>();
  private pendingCount = 0;
  /** Connections closed to make room, not to be chosen again while they close. */
  private readonly closing = new WeakSet<Connection>();

  constructor(
    private readonly maxConnections: number,
    private readonly maxPending = MAX_PENDING,
  ) {}

  /**
   * For the connection gater: whether a socket just accepted is refused before its handshake.
   * With every pending place taken, the oldest handshake of the address pending the most is
   * closed for it (an honest handshake ends in milliseconds: the oldest is the likeliest to be
   * held open on purpose), unless its own address pends the most alone.
   */
  denyHandshake(maConn: MultiaddrConnection): boolean {
    const host = hostOf(maConn.remoteAddr);
    if (host === undefined) return false;
    const own = this.pending.get(host);
    if ((own?.size ?? 0) >= PENDING_PER_HOST) return true;
    if (this.pendingCount >= this.maxPending) {
      const victim = this.oldestOfLargest(own?.size ?? 0);
      if (!victim) return true;
      this.handshakeEnded(victim);
      victim.abort(new Error('handshake closed for a newer one: its address holds the most pending'));
    }
    if (own) own.add(maConn);
    else this.pending.set(host, new Set([maConn]));
    this.pendingCount++;
    maConn.addEventListener('close', () => this.handshakeEnded(maConn), { once: true });
    return false;
  }

  /** The oldest pending handshake among the addresses pending the most, if they pend at least `than`'s share. */
  private oldestOfLargest(than: number): MultiaddrConnection | undefined {
    let size = 0;
    for (const set of this.pending.values()) size = Math.max(size, set.size);
    // Its own address pends the most alone: the newcomer is the one refused.
    if (size <= than) return undefined;
    let oldest: MultiaddrConnection | undefined;
    for (const set of this.pending.values()) {
      if (set.size !== size) continue;
      const first = set.values().next().value!;
      if (!oldest || first.timeline.open < oldest.timeline.open) oldest = first;
    }
    return oldest;
  }

  /** The handshake on `maConn` ended, done or failed; counted once however often told. */
  handshakeEnded(maConn: MultiaddrConnection): void {
    const host = hostOf(maConn.remoteAddr);
    if (host === undefined) return;
    const set = this.pending.get(host);
    if (!set?.delete(maConn)) return;
    this.pendingCount--;
    if (set.size === 0) this.pending.delete(host);
  }

  /** Handshakes pending from `host` now. */
  pendingFrom(host: string): number {
    return this.pending.get(host)?.size ?? 0;
  }

  /**
   * `opened` has just joined `all` (every connection the node holds): the connection to close
   * to keep within the maximum, if any.
   */
  choose(opened: Connection, all: readonly Connection[]): Connection | undefined {
    const live = all.filter((c) => !this.closing.has(c) && c.status === 'open');
    if (opened.direction !== 'inbound' || live.length <= this.maxConnections) return undefined;
    const byHost = new Map<string, Connection[]>();
    for (const c of live) {
      if (c.direction !== 'inbound') continue;
      const host = hostOf(c.remoteAddr) ?? c.remoteAddr.toString();
      const group = byHost.get(host);
      if (group) group.push(c);
      else byHost.set(host, [c]);
    }
    const own = byHost.get(hostOf(opened.remoteAddr) ?? opened.remoteAddr.toString()) ?? [opened];
    let largest = own;
    for (const group of byHost.values()) if (group.length > largest.length) largest = group;
    const victim = largest === own ? opened : largest.reduce((a, b) => (b.timeline.open > a.timeline.open ? b : a));
    this.closing.add(victim);
    return victim;
  }

  /**
   * Closes what `choose` picks: a connection that has just opened, among all the node holds. The
   * transport logs a connection closed on an error, this one's reason included.
   */
  opened(opened: Connection, all: readonly Connection[]): void {
    this.choose(opened, all)?.abort(new Error('connection closed to keep within the node\'s maximum: its address holds the most'));
  }
}
