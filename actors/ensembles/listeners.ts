/**
 * The node's listeners on an ensemble's gateway addresses (README "Names between parts"): one
 * per other part's declared port, where `<part>.internal:<port>` lands from inside a container.
 * Each accepted connection is handed to `connect`, which finds where the part runs now; anything
 * that goes wrong closes that one connection, never the listener or the node.
 */
import { createServer, type Server, type Socket } from 'node:net';
import { errorText } from '../../runtime/errors.js';
import type { Logger } from '../../runtime/log.js';
import { inSubnet } from './docker-networks.js';

export interface Listening {
  part: string;
  port: number;
  gateway: string;
  subnet: string;
}

export type Connect = (part: string, port: number, socket: Socket) => Promise<void>;

interface Open extends Listening {
  server: Server;
  sockets: Set<Socket>;
}

const keyOf = (l: Pick<Listening, 'gateway' | 'port'>) => `${l.gateway}:${l.port}`;

export class PartListeners {
  private readonly open = new Map<string, Open>();

  constructor(
    private readonly connect: Connect,
    private readonly log: Logger,
    /** Connections one listener carries at once: each holds a tunnel, which the far node bounds per peer too. */
    private readonly maxConnections: number,
  ) {}

  /** What listens now. */
  list(): Listening[] {
    return [...this.open.values()].map(({ part, port, gateway, subnet }) => ({ part, port, gateway, subnet }));
  }

  /** Listens where `wanted` says and nowhere else. A port that cannot be listened on is logged and left: its name is then refused. */
  async reconcile(wanted: readonly Listening[]): Promise<void> {
    const want = new Map(wanted.map((l) => [keyOf(l), l]));
    for (const [k, o] of this.open) {
      const w = want.get(k);
      if (!w || w.part !== o.part || w.subnet !== o.subnet) this.close(k);
    }
    for (const [k, w] of want) if (!this.open.has(k)) await this.listen(k, w);
  }

  closeAll(): void {
    for (const k of [...this.open.keys()]) this.close(k);
  }

  private async listen(k: string, l: Listening): Promise<void> {
    const server = createServer();
    server.maxConnections = this.maxConnections;
    const open: Open = { ...l, server, sockets: new Set() };
    server.on('connection', (socket) => this.accept(open, socket));
    try {
      await new Promise<void>((resolve, reject) => {
        server.once('error', reject);
        server.listen(l.port, l.gateway, () => {
          server.removeListener('error', reject);
          resolve();
        });
      });
    } catch (e) {
      // Another listener on the port of every address (0.0.0.0) holds it: the name is refused, the rest work.
      this.log.warn({ part: l.part, port: l.port, gateway: l.gateway, err: errorText(e) }, 'cannot listen for an ensemble part');
      return;
    }
    server.on('error', (e) => this.log.warn({ part: l.part, port: l.port, err: errorText(e) }, 'ensemble part listener failed'));
    this.open.set(k, open);
  }

  private close(k: string): void {
    const o = this.open.get(k);
    if (!o) return;
    this.open.delete(k);
    o.server.close();
    for (const s of o.sockets) s.destroy();
  }

  private accept(open: Open, socket: Socket): void {
    socket.on('error', () => undefined);
    // The gateway address is the host's: anything routed to it could knock. Only the ensemble's
    // own bridge (its parts) may use the names.
    if (!socket.remoteAddress || !inSubnet(socket.remoteAddress, open.subnet)) {
      this.log.warn({ part: open.part, port: open.port, from: socket.remoteAddress }, 'ensemble name connection from outside the ensemble refused');
      socket.destroy();
      return;
    }
    open.sockets.add(socket);
    socket.on('close', () => open.sockets.delete(socket));
    socket.pause();
    this.connect(open.part, open.port, socket).catch((e: unknown) => {
      this.log.info({ part: open.part, port: open.port, err: errorText(e) }, 'ensemble name connection refused');
      socket.destroy();
    });
  }
}
