/**
 * `/dms/tunnel/1.0.0` (README "Ports and tunnels"): a TCP connection carried over one libp2p
 * stream to a port of a job running on the remote node. The opener sends one header frame
 * (`{job_id, port}`, length-prefixed JSON as the actor protocol frames it, bounded); the
 * provider answers with one frame, `{ok: true}` or `{error}`, and from then on the stream
 * carries the connection's bytes both ways. The header is not signed: the libp2p connection's
 * Noise handshake already proves which peer opened the stream, and that peer id is all the
 * provider checks (whom the job belongs to); a signature would restate it.
 */
import { connect, type Socket } from 'node:net';
import type { Connection, PeerId, Stream } from '@libp2p/interface';
import { rememberNewest } from '../bounded-map.js';
import { DmsError, errorText, isDmsError } from '../errors.js';
import { parseUntrustedJson } from '../json.js';
import { LogGate } from '../log.js';
import { encodeFrame, takeFrame } from './frames.js';
import type { DmsLibp2p } from './host.js';
import type { NetworkLog } from './network-log.js';

export const TUNNEL_PROTOCOL = '/dms/tunnel/1.0.0';
/** A header or reply is a job id, a port or one error sentence: far under this. */
const MAX_CONTROL_BYTES = 1024;
const DEFAULT_HEADER_TIMEOUT_MS = 5_000;
const DEFAULT_CONNECT_TIMEOUT_MS = 5_000;
/** How long a refused stream waits for its opener to close before it is reset. */
const CLOSE_WAIT_MS = 2_000;
/**
 * A peer's refusals are logged once, then at most once per this, with how many went unlogged:
 * 3,000 tunnels asked for jobs that do not exist wrote 1.2 MB of warnings in 6 s.
 */
const REFUSAL_LOG_MS = 60_000;
/** Peers whose refusals are remembered for that, at most. */
const REFUSAL_LOG_PEERS = 1024;

export interface TunnelRequest {
  job_id: string;
  port: number;
}

export interface TunnelTarget {
  host: string;
  port: number;
}

export interface TunnelLimits {
  /** Open tunnels one peer may hold at once (`tunnel.max_streams_per_peer`). */
  maxPerPeer: number;
  /** Open tunnels in all (`tunnel.max_streams`). */
  maxTotal: number;
  /** A tunnel with no byte either way for this long is closed (`tunnel.idle_timeout_ms`). */
  idleMs: number;
}

export interface TunnelServerOptions extends TunnelLimits {
  /** Where `peer` may be let through to for `req`; throws (a DmsError saying why) to refuse. */
  authorize: (peer: string, req: TunnelRequest) => Promise<TunnelTarget>;
  log: NetworkLog;
  headerTimeoutMs?: number;
  connectTimeoutMs?: number;
}

/**
 * The provider's side: registered on the node's libp2p, it checks each stream's header with
 * `authorize`, connects to the target and pipes. Refusals (bounds, authorization, a target that
 * does not answer) are an error frame, then close, and a warning in the log.
 */
export class TunnelServer {
  private readonly perPeer = new Map<string, number>();
  private total = 0;
  /** Per peer: when its next refusal may be logged, and how many went unlogged. */
  private readonly refusalLogs = new Map<string, LogGate>();

  private constructor(private readonly opts: TunnelServerOptions) {}

  static async attach(node: DmsLibp2p, opts: TunnelServerOptions): Promise<TunnelServer> {
    const server = new TunnelServer(opts);
    // libp2p resets streams past its own per-connection cap silently; above ours, so a flood is
    // answered with our error frame first.
    await node.handle(TUNNEL_PROTOCOL, (stream, connection) => server.accept(stream, connection), {
      maxInboundStreams: opts.maxPerPeer * 2,
      runOnLimitedConnection: false,
    });
    return server;
  }

  /** Tunnels open now, for tests and stats. */
  get open(): number {
    return this.total;
  }

  private accept(stream: Stream, connection: Connection): void {
    const peer = connection.remotePeer.toString();
    const held = this.perPeer.get(peer) ?? 0;
    if (held >= this.opts.maxPerPeer || this.total >= this.opts.maxTotal) {
      const which = held >= this.opts.maxPerPeer ? `peer ${peer} already holds ${held} tunnels (tunnel.max_streams_per_peer)` : `this node already holds ${this.total} tunnels (tunnel.max_streams)`;
      this.refuse(stream, peer, undefined, new DmsError('overloaded', which));
      return;
    }
    this.perPeer.set(peer, held + 1);
    this.total++;
    let released = false;
    const release = () => {
      if (released) return;
      released = true;
      this.total--;
      const n = (this.perPeer.get(peer) ?? 1) - 1;
      if (n <= 0) this.perPeer.delete(peer);
      else this.perPeer.set(peer, n);
    };
    stream.addEventListener('close', release);
    void this.serve(stream, peer, release).catch((e: unknown) => {
      release();
      this.opts.log.warn({ peer, err: errorText(e) }, 'tunnel failed');
      stream.abort(e instanceof Error ? e : new Error(String(e)));
    });
  }

  /** `release` frees the stream's slot: at once on a refusal, whose opener may never close its side. */
  private async serve(stream: Stream, peer: string, release: () => void): Promise<void> {
    let first: { frame: Uint8Array; rest: Uint8Array };
    try {
      first = await readControl(stream, this.opts.headerTimeoutMs ?? DEFAULT_HEADER_TIMEOUT_MS);
    } catch (e) {
      return this.refuse(stream, peer, undefined, e, release);
    }
    let req: TunnelRequest;
    try {
      req = parseRequest(first.frame);
    } catch (e) {
      return this.refuse(stream, peer, undefined, e, release);
    }
    let target: TunnelTarget;
    let socket: Socket;
    try {
      target = await this.opts.authorize(peer, req);
      socket = await connectTcp(target, this.opts.connectTimeoutMs ?? DEFAULT_CONNECT_TIMEOUT_MS);
    } catch (e) {
      return this.refuse(stream, peer, req, e, release);
    }
    try {
      // The opener may have reset the stream while the job's port was being connected.
      if (stream.status !== 'open') throw new DmsError('unavailable', 'the opener closed the stream before the tunnel was made');
      stream.send(encodeFrame(JSON.stringify({ ok: true })));
    } catch (e) {
      // Nothing will carry the connection to the job: it would stay open for good.
      socket.destroy();
      throw e;
    }
    this.opts.log.debug({ peer, job_id: req.job_id, port: req.port }, 'tunnel opened');
    pipe(socket, stream, first.rest, this.opts.idleMs);
  }

  private refuse(stream: Stream, peer: string, req: TunnelRequest | undefined, e: unknown, release?: () => void): void {
    release?.();
    const error = e instanceof DmsError ? e.message : `tunnel refused: ${errorText(e)}`;
    const gate = this.refusalLogs.get(peer) ?? new LogGate(REFUSAL_LOG_MS);
    rememberNewest(this.refusalLogs, peer, gate, REFUSAL_LOG_PEERS);
    const unlogged = gate.pass();
    if (unlogged !== undefined) this.opts.log.warn({ peer, ...(req ? { job_id: req.job_id, port: req.port } : {}), error, ...(unlogged ? { unlogged } : {}) }, 'tunnel refused');
    try {
      stream.send(encodeFrame(JSON.stringify({ error: error.slice(0, 500) })));
    } catch {
      // A stream already reset by its opener has nobody to tell.
    }
    // A graceful close waits for the opener to close its side too, which a hostile one never does.
    stream.close({ signal: AbortSignal.timeout(CLOSE_WAIT_MS) }).catch(() => stream.abort(new Error(error)));
  }
}

/**
 * The opener's side: a stream to `peer` whose far end is connected to the job's port, or a
 * DmsError saying why the provider refused. Bytes the provider sent right after its answer are
 * handed back in `rest`, to be written first.
 */
export async function openTunnel(node: DmsLibp2p, peer: PeerId, req: TunnelRequest, timeoutMs = DEFAULT_CONNECT_TIMEOUT_MS * 2): Promise<{ stream: Stream; rest: Uint8Array }> {
  let stream: Stream;
  try {
    stream = await node.dialProtocol(peer, TUNNEL_PROTOCOL, { signal: AbortSignal.timeout(timeoutMs) });
  } catch (e) {
    throw new DmsError('unroutable', `cannot open a tunnel to peer ${peer.toString()}: ${errorText(e)}`, { cause: e });
  }
  stream.send(encodeFrame(JSON.stringify(req)));
  let answer: { frame: Uint8Array; rest: Uint8Array };
  try {
    answer = await readControl(stream, timeoutMs);
  } catch (e) {
    stream.abort(e instanceof Error ? e : new Error(String(e)));
    throw new DmsError('unavailable', `peer ${peer.toString()} did not answer the tunnel request: ${errorText(e)}`, { cause: e });
  }
  let reply: { ok?: unknown; error?: unknown } | undefined;
  try {
    reply = parseJson(answer.frame) as typeof reply;
  } catch (e) {
    // Ended here, or the stream stays open as long as the provider keeps it.
    stream.abort(e instanceof Error ? e : new Error(String(e)));
    throw new DmsError('invalid', `peer ${peer.toString()} answered the tunnel request with a frame that is not JSON`, { cause: e });
  }
  if (reply?.ok !== true) {
    stream.abort(new Error('refused'));
    throw new DmsError('forbidden', `peer ${peer.toString()} refused the tunnel: ${typeof reply?.error === 'string' ? reply.error : 'no reason given'}`);
  }
  return { stream, rest: answer.rest };
}

/**
 * Carries bytes between a TCP socket and a libp2p stream until either side ends, honouring
 * backpressure both ways (a slow reader pauses the other side instead of growing a buffer).
 * `first` is stream data read before the pipe began, written to the socket first.
 */
export function pipe(socket: Socket, stream: Stream, first: Uint8Array, idleMs: number): void {
  socket.setNoDelay(true);
  socket.setTimeout(idleMs, () => {
    socket.destroy();
    stream.abort(new DmsError('timeout', `tunnel idle for ${idleMs} ms`));
  });
  const toSocket = (data: Uint8Array | Iterable<Uint8Array>) => {
    let room: boolean;
    if (data instanceof Uint8Array) room = socket.write(data);
    else {
      // A message the muxer pieced together: its pieces go as they are (one writev), not
      // copied into one buffer first.
      socket.cork();
      room = true;
      for (const piece of data) room = socket.write(piece);
      socket.uncork();
    }
    if (!room) {
      // Paused inside resume()'s own dispatch, the stream would be credited again right after
      // (libp2p resumes the muxer's window once the dispatch returns): paused once it has.
      if (resuming) repause = true;
      else quietly(() => stream.pause());
      socket.once('drain', resume);
    }
  };
  let resuming = false;
  let repause = false;
  const resume = () => {
    resuming = true;
    repause = false;
    quietly(() => stream.resume());
    resuming = false;
    if (repause) quietly(() => stream.pause());
  };
  if (first.byteLength > 0) toSocket(first);
  stream.addEventListener('message', (evt) => toSocket(evt.data));
  resume();
  stream.addEventListener('remoteCloseWrite', () => socket.end());
  stream.addEventListener('close', () => {
    if (!socket.destroyed) socket.destroySoon();
  });
  socket.on('data', (data: Buffer) => {
    let sent: boolean;
    try {
      sent = stream.send(data);
    } catch {
      // The peer reset the stream: nobody reads this side any more.
      socket.destroy();
      return;
    }
    if (!sent) {
      socket.pause();
      stream.onDrain().then(
        () => socket.resume(),
        () => socket.destroy(),
      );
    }
  });
  socket.on('end', () => void stream.close().catch(() => undefined));
  socket.on('error', (e) => stream.abort(e));
  socket.on('close', (hadError) => {
    if (hadError) stream.abort(new Error('the TCP side closed with an error'));
  });
}

/**
 * Pausing or resuming a stream the peer already reset throws; inside a stream's event handler
 * that would be an uncaught exception, so a hostile peer's reset could take the node down.
 */
function quietly(fn: () => void): void {
  try {
    fn();
  } catch {
    // The stream is closing: its 'close' handler tears the tunnel down.
  }
}

function connectTcp(target: TunnelTarget, timeoutMs: number): Promise<Socket> {
  return new Promise((resolve, reject) => {
    const socket = connect({ host: target.host, port: target.port });
    const timer = setTimeout(() => {
      socket.destroy();
      reject(new DmsError('unavailable', `port ${target.port} of the job did not accept a connection within ${timeoutMs} ms`));
    }, timeoutMs);
    socket.once('connect', () => {
      clearTimeout(timer);
      socket.removeAllListeners('error');
      resolve(socket);
    });
    socket.once('error', (e) => {
      clearTimeout(timer);
      reject(new DmsError('unavailable', `port ${target.port} of the job refused the connection (${errorText(e)})`));
    });
  });
}

/** The first frame of `stream` (at most MAX_CONTROL_BYTES) and whatever arrived after it. */
function readControl(stream: Stream, timeoutMs: number): Promise<{ frame: Uint8Array; rest: Uint8Array }> {
  return new Promise((resolve, reject) => {
    let buffer: Uint8Array = new Uint8Array(0);
    const done = (fn: () => void) => {
      // Whatever the muxer delivers next waits for the pipe (which resumes), not lost in between.
      quietly(() => stream.pause());
      clearTimeout(timer);
      stream.removeEventListener('message', onMessage);
      stream.removeEventListener('close', onClose);
      fn();
    };
    const timer = setTimeout(() => done(() => reject(new DmsError('timeout', `no tunnel header within ${timeoutMs} ms`))), timeoutMs);
    const onClose = () => done(() => reject(new DmsError('unavailable', 'the stream closed before its first frame')));
    const onMessage = (evt: { data: Uint8Array | { subarray(): Uint8Array } }) => {
      const data = evt.data instanceof Uint8Array ? evt.data : evt.data.subarray();
      buffer = concat(buffer, data);
      let taken;
      try {
        taken = takeFrame(buffer, MAX_CONTROL_BYTES);
      } catch (e) {
        return done(() => reject(e));
      }
      if (taken) done(() => resolve(taken));
    };
    stream.addEventListener('message', onMessage);
    stream.addEventListener('close', onClose);
  });
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

function parseRequest(frame: Uint8Array): TunnelRequest {
  const value = parseJson(frame) as Partial<TunnelRequest> | undefined;
  const jobId = value?.job_id;
  const port = value?.port;
  if (typeof jobId !== 'string' || !UUID.test(jobId)) throw new DmsError('invalid', 'tunnel header: job_id is not a job id');
  if (typeof port !== 'number' || !Number.isInteger(port) || port < 1 || port > 65535) throw new DmsError('invalid', 'tunnel header: port is not from 1 to 65535');
  return { job_id: jobId, port };
}

function parseJson(frame: Uint8Array): unknown {
  try {
    return parseUntrustedJson(new TextDecoder('utf-8', { fatal: true }).decode(frame));
  } catch (e) {
    throw new DmsError('invalid', isDmsError(e) ? `tunnel control frame: ${e.message}` : 'tunnel control frame is not JSON');
  }
}

function concat(a: Uint8Array, b: Uint8Array): Uint8Array {
  if (a.length === 0) return b;
  const out = new Uint8Array(a.length + b.length);
  out.set(a);
  out.set(b, a.length);
  return out;
}
