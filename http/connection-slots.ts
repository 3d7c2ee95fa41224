/**
 * What the REST server does with a connection past `rest.max_connections`. node:http closed
 * every new one, so one client holding the slots with requests it sends a byte a second (a
 * "slowloris": each answered only at the 300 s request timeout, and reopened at once) kept
 * every other client out, `/health` included. Now the new connection is kept, and the one that
 * is waiting on its client and has sent least per second of its wait goes instead: an idle
 * keep-alive connection first, then the slowest request. A connection the node is answering is
 * never closed for another; when every one is, the new one is closed as before.
 */
import type { Server } from 'node:http';
import type { Socket } from 'node:net';

interface Slot {
  /** When the connection began waiting on its client (opened, an answer done, a body begun); null while the node works. */
  since: number | null;
  /** `bytesRead` when it began. */
  read: number;
}

export class ConnectionSlots {
  private readonly slots = new Map<Socket, Slot>();
  /** Under TLS, accepted sockets whose handshake is not done, by their client's address and port. */
  private readonly handshaking = new Map<string, Socket>();

  constructor(private readonly max: number) {}

  /**
   * Takes over `server`'s connection bound: node:http lets one past it in, and this decides which
   * goes. Under TLS a connection counts from its first byte, as node:net counts it: counted only
   * once its handshake was done, connections that never began one filled the bound unseen here
   * and kept every client out for the handshake timeout. The socket a request comes on then
   * wraps the one accepted, and takes over its slot.
   */
  attach(server: Server, secure: boolean): void {
    server.maxConnections = this.max + 1;
    server.on('connection', (socket: Socket) => {
      this.opened(socket);
      if (!secure) return;
      const key = remoteKey(socket);
      this.handshaking.set(key, socket);
      socket.once('close', () => this.handshaking.get(key) === socket && this.handshaking.delete(key));
    });
    if (secure) server.on('secureConnection', (tls: Socket) => this.handedOver(tls));
  }

  private handedOver(tls: Socket): void {
    const key = remoteKey(tls);
    const raw = this.handshaking.get(key);
    const slot = raw && this.slots.get(raw);
    if (!raw || !slot) return;
    this.handshaking.delete(key);
    this.slots.delete(raw);
    this.slots.set(tls, slot);
    tls.once('close', () => this.slots.delete(tls));
  }

  /** The node works on a request of `socket` whose body has arrived (or has none). */
  working(socket: Socket): void {
    const slot = this.slots.get(socket);
    if (slot) slot.since = null;
  }

  /** `socket` waits on its client: for a next request, or for the rest of a body. */
  waiting(socket: Socket): void {
    const slot = this.slots.get(socket);
    if (slot && slot.since === null) {
      slot.since = Date.now();
      slot.read = socket.bytesRead;
    }
  }

  private opened(socket: Socket): void {
    this.slots.set(socket, { since: Date.now(), read: 0 });
    socket.once('close', () => this.slots.delete(socket));
    if (this.slots.size <= this.max) return;
    const slowest = this.slowest(socket);
    (slowest ?? socket).destroy();
  }

  /** Of the connections waiting on their clients, other than `fresh`, the one sending least per second. */
  private slowest(fresh: Socket): Socket | undefined {
    const now = Date.now();
    let pick: Socket | undefined;
    let pickRate = Number.POSITIVE_INFINITY;
    let pickSince = Number.POSITIVE_INFINITY;
    for (const [socket, slot] of this.slots) {
      if (socket === fresh || slot.since === null) continue;
      const rate = (socket.bytesRead - slot.read) / Math.max(1, now - slot.since);
      if (rate < pickRate || (rate === pickRate && slot.since < pickSince)) {
        pick = socket;
        pickRate = rate;
        pickSince = slot.since;
      }
    }
    return pick;
  }
}

const remoteKey = (socket: Socket): string => `${socket.remoteAddress}|${socket.remotePort}`;
