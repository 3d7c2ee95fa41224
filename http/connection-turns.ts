/**
 * Requests of one connection take turns. HTTP/1.1 answers a connection's requests in the order
 * they came, so handling more of them at once than a few only holds their answers in memory
 * until the ones before are written: a client pipelining ten thousand `GET /api/v1/jobs` on three
 * connections, reading nothing, took a node to 1.4 GB, and the node went on working for them 40 s
 * after the client had gone. A few are handled at once (the next answer is ready when the one
 * before is written); the rest wait, in order, and are dropped if the connection closes.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Socket } from 'node:net';

/** Requests of one connection handled at once. */
export const CONCURRENT_PER_CONNECTION = 8;
/** Requests of one connection read and waiting for a turn; a connection past it is closed. */
export const WAITING_PER_CONNECTION = 64;

interface Turns {
  active: number;
  waiting: (() => void)[];
}

const turns = new WeakMap<Socket, Turns>();

/**
 * Runs `serve` for this request when its connection has a turn free: at once for a connection
 * with fewer than CONCURRENT_PER_CONNECTION requests being answered. A request past
 * WAITING_PER_CONNECTION waiting closes the connection: none of its answers could be written
 * before all the ones it waits behind.
 */
export function takeTurn(req: IncomingMessage, res: ServerResponse, serve: () => void): void {
  const socket = req.socket;
  let line = turns.get(socket);
  if (!line) {
    const made: Turns = { active: 0, waiting: [] };
    turns.set(socket, (line = made));
    socket.once('close', () => (made.waiting.length = 0));
  }
  const own = line;
  const run = () => {
    // Its turn came as the connection closed (an answer before it ended with it): none is served.
    if (socket.destroyed) return void (own.waiting.length = 0);
    own.active++;
    res.once('close', () => {
      own.active--;
      own.waiting.shift()?.();
    });
    serve();
  };
  if (own.active < CONCURRENT_PER_CONNECTION) return run();
  if (own.waiting.length >= WAITING_PER_CONNECTION) return void socket.destroy();
  own.waiting.push(run);
}
