import { readFileSync } from 'node:fs';
import { createServer as createHttpServer, type IncomingMessage, type Server, type ServerResponse, STATUS_CODES } from 'node:http';
import { createServer as createHttpsServer } from 'node:https';
import type { AddressInfo, Socket } from 'node:net';
import { type H3, toNodeHandler } from 'h3';
import type { Config } from '../runtime/config.js';
import { DmsError } from '../runtime/errors.js';
import { ConnectionSlots } from './connection-slots.js';
import { overflowAnswer } from './header-overflow.js';
import { takeTurn } from './connection-turns.js';
import { targetProblem } from './request-target.js';

/** How long a TLS client may take over its handshake. */
const TLS_HANDSHAKE_MS = 10_000;
/**
 * How long a request's line and headers may take to arrive (node:http's own default, which it
 * drops when the whole-request bound is off, so it is set here).
 */
export const HEADERS_TIMEOUT_MS = 60_000;
/**
 * node:http's bound on a whole request, body included (300 s by default), is off: an upload
 * still arriving at 300 s was cut with a 408, however steadily it came (1 GiB, the default
 * `blocks.max_upload_bytes`, over a link slower than 3.6 MB/s). A body that stops arriving is cut
 * after `rest.body_idle_timeout_s` (cutWhenStalled), and one that arrives slowest gives its
 * connection up when the slots are wanted (./connection-slots.ts): those bound what a slow
 * client holds, not how long an honest one may take.
 */
const SERVER_TIMEOUTS = { requestTimeout: 0, headersTimeout: HEADERS_TIMEOUT_MS };

export interface Listening {
  server: Server;
  url: string;
  close(): Promise<void>;
}

/** Serves the app on `rest.addr:rest.port` (port 0 picks a free one); HTTPS only when TLS is on. */
export async function listen(app: H3, config: Config): Promise<Listening> {
  const serve = toNodeHandler(app);
  const slots = new ConnectionSlots(config.rest.max_connections);
  const handler = (req: IncomingMessage, res: ServerResponse) => {
    // A request that comes on a connection closing after a refused body is not served: its
    // answer could never be written, and what it asked would be done unanswered.
    if (lingering.has(req.socket)) return void req.socket.destroy();
    const withBody = hasBody(req);
    // While its body is on the way the connection waits on its client; then on the node, until answered.
    if (withBody && !req.complete) {
      slots.waiting(req.socket);
      req.once('end', () => slots.working(req.socket));
    } else slots.working(req.socket);
    res.once('finish', () => slots.waiting(req.socket));
    takeTurn(req, res, () => {
      // Its body is read from its turn on: a pipelined one waiting behind others is not stalled.
      if (withBody) {
        cutWhenStalled(req, config.rest.body_idle_timeout_s * 1000);
        closeOnUnreadBody(req, res);
      }
      const problem = targetProblem(req.url ?? '');
      if (problem) return answerJson(res, 400, problem);
      void serve(req, res);
    });
  };
  const tls = config.tls;
  let server: Server;
  if (tls.enabled) {
    if (!tls.cert_file || !tls.key_file) throw new DmsError('invalid', 'tls: enabled needs tls.cert_file and tls.key_file');
    let cert: Buffer, key: Buffer;
    try {
      cert = readFileSync(tls.cert_file);
      key = readFileSync(tls.key_file);
    } catch (e) {
      throw new DmsError('invalid', `tls: cannot read certificate or key (${(e as Error).message})`);
    }
    // A client finishes its handshake in a few round trips; Node waits 120 s for one by default.
    server = createHttpsServer({ cert, key, handshakeTimeout: TLS_HANDSHAKE_MS, ...SERVER_TIMEOUTS }, handler) as unknown as Server;
  } else {
    server = createHttpServer(SERVER_TIMEOUTS, handler);
  }
  server.keepAliveTimeout = 65_000;
  // Every connection is a file descriptor the node's libp2p, SQLite and containers need too.
  slots.attach(server, tls.enabled);
  // A client that asks before it sends a body (`Expect: 100-continue`, as `dms put` does) is told
  // to go on only once the handler reads the body: node:http would say so at once. A request
  // refused on what its headers say (a declared size the storage share cannot hold, a missing
  // credential) is then answered before any of its body is sent, and no reset of an unread body
  // closed after the answer can reach the client before the answer does.
  server.on('checkContinue', (req: IncomingMessage, res: ServerResponse) => {
    continueOnRead(req, res);
    server.emit('request', req, res);
  });
  server.on('clientError', answerClientError);
  await new Promise<void>((resolve, reject) => {
    server.once('error', (e: NodeJS.ErrnoException) =>
      reject(new DmsError('invalid', `rest: cannot listen on ${config.rest.addr}:${config.rest.port} (${e.code ?? e.message})`)),
    );
    server.listen(config.rest.port, config.rest.addr, () => resolve());
  });
  const { port } = server.address() as AddressInfo;
  const host = config.rest.addr.includes(':') ? `[${config.rest.addr}]` : config.rest.addr;
  const url = `${tls.enabled ? 'https' : 'http'}://${host}:${port}`;
  return {
    server,
    url,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}

/**
 * How long a connection closed on a request body still arriving reads on and drops it. The
 * socket is half-closed after the answer; closed at once, its unread bytes, and each the client
 * sends after, draw a reset, which discards the answer still waiting in the client's receive
 * buffer: a client busy writing (a tar upload, which has no size to refuse up front) heard
 * EPIPE, never why. nginx's lingering close does the same (up to 30 s); the answer is on the
 * wire before this starts, so it only needs to outlast the client's writes in flight.
 */
const LINGER_MS = 2_000;
/** Connections closing after a refused body: they only read and drop until they go. */
const lingering = new WeakSet<Socket>();

/** Whether the request says a body follows (a length over 0, or chunks). */
function hasBody(req: IncomingMessage): boolean {
  const length = req.headers['content-length'];
  return (length !== undefined && length !== '0') || req.headers['transfer-encoding'] !== undefined;
}

/**
 * Answered before its body was read to the end (refused on its size, its type, a credential),
 * a request's connection closes after the answer: kept alive, node:http reads the rest of the
 * body to find the next request, for as long as the client sends it.
 */
function closeOnUnreadBody(req: IncomingMessage, res: ServerResponse): void {
  const writeHead = res.writeHead;
  // node:http writes every answer's head through writeHead (its implicit head too), and decides
  // keep-alive from `shouldKeepAlive` as it does.
  res.writeHead = function (this: ServerResponse, ...args: Parameters<ServerResponse['writeHead']>) {
    res.writeHead = writeHead;
    if (!req.complete) {
      this.shouldKeepAlive = false;
      lingerOnClose(req.socket);
    }
    return writeHead.apply(this, args);
  } as ServerResponse['writeHead'];
}

/** node:http closes a connection after its last answer with `destroySoon`: here, after LINGER_MS of reading on. */
function lingerOnClose(socket: Socket): void {
  if (lingering.has(socket)) return;
  lingering.add(socket);
  socket.destroySoon = function (this: Socket) {
    this.end();
    // Not what keeps a stopping node's process up.
    const timer = setTimeout(() => this.destroy(), LINGER_MS).unref();
    this.once('close', () => clearTimeout(timer));
  };
}

/** Sends `100 Continue` when the body is first read, unless the answer went first. */
function continueOnRead(req: IncomingMessage, res: ServerResponse): void {
  const read = req._read;
  req._read = function (this: IncomingMessage, size: number) {
    req._read = read;
    if (!res.headersSent) res.writeContinue();
    return read.call(this, size);
  };
}

/**
 * A request whose body stops arriving for `idleMs` is cut (its connection closed): an upload
 * claims the storage it may write before it is read, so three stalled 1 GiB uploads held 3 GiB of
 * the share for as long as their clients kept them open. Only while the body is read: a
 * response may wait as long as it likes (a followed job's output).
 */
function cutWhenStalled(req: IncomingMessage, idleMs: number): void {
  // A socket that times out with nobody listening is closed by node:http itself. Held here: by
  // the time a refused upload's request closes, it has let go of its socket.
  const socket = req.socket;
  socket.setTimeout(idleMs);
  // Read to its end: the response may take its time, and node:http sets the keep-alive timeout after it.
  req.once('end', () => socket.setTimeout(0));
}

/** An answer written before the app sees the request: `{"error": message}`. */
function answerJson(res: ServerResponse, status: number, message: string): void {
  const body = JSON.stringify({ error: message });
  res.writeHead(status, { 'content-type': 'application/json; charset=utf-8', 'content-length': Buffer.byteLength(body) });
  res.end(body);
}

/**
 * HTTP that node:http cannot parse (two lengths, a length beside chunks, a control byte in a
 * header) is answered, as every other refusal is, with a JSON error saying what was wrong;
 * node:http's own answer was a bare `400 Bad Request`. The connection closes after it: where
 * the next request would start is not known.
 */
function answerClientError(err: NodeJS.ErrnoException & { reason?: string; rawPacket?: Buffer }, socket: Socket): void {
  // Nothing to answer on a connection gone, or one already answering an earlier request.
  const answering = (socket as Socket & { _httpMessage?: ServerResponse })._httpMessage;
  if (err.code === 'ECONNRESET' || !socket.writable || answering?.headersSent) return void socket.destroy();
  const { status, message } =
    err.code === 'HPE_HEADER_OVERFLOW'
      ? overflowAnswer(err.rawPacket)
      : err.code === 'ERR_HTTP_REQUEST_TIMEOUT'
        ? { status: 408, message: 'the request did not arrive whole in time' }
        : { status: 400, message: `malformed HTTP request: ${err.reason ?? err.code ?? err.message}` };
  const body = JSON.stringify({ error: message });
  socket.end(`HTTP/1.1 ${status} ${STATUS_CODES[status]}\r\nContent-Type: application/json; charset=utf-8\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`);
}
