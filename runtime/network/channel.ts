import type { Stream } from '@libp2p/interface';
import { DmsError, errorText, isDmsError } from '../errors.js';

interface PendingWrite {
  frame: Uint8Array;
  resolve: () => void;
  reject: (e: DmsError) => void;
}

// Frames queued behind one another go out as one send: one muxer frame and one syscall
// instead of many. The cap keeps one batch from hogging the connection.
const MAX_BATCH_BYTES = 256 * 1024;
// How long a closing stream may take to flush what was already written to it.
const CLOSE_FLUSH_MS = 1_000;
/**
 * How long a stream may take none of what is written to it before it is given up, by default:
 * a peer that stopped reading otherwise held whatever waited for it, and every caller awaiting
 * a write to it, for as long as the connection lived. As long as the block exchange's stall.
 */
export const DEFAULT_STALL_MS = 10_000;

/**
 * Bytes waiting over every channel of a transport. Each channel is bounded on its own, but
 * peers that stopped reading could together hold that bound times the connections (300 × 16
 * MiB); past this one, only a peer with less than a batch waiting may queue more.
 */
export class QueuedBytes {
  held = 0;
  constructor(readonly limit: number) {}
}

export interface ChannelOptions {
  /** Opens a fresh stream to the peer; rejects with a DmsError when the peer cannot be reached. */
  open: () => Promise<Stream>;
  /** Bytes that may wait for this peer before writes are refused as overloaded. */
  maxQueuedBytes: number;
  /** What waits over every peer, shared by the transport's channels. */
  total: QueuedBytes;
  /** How long the stream may take nothing before it is aborted and what waits refused (DEFAULT_STALL_MS). */
  stallMs?: number;
  /** Called when opening failed and every queued write was rejected: the channel holds nothing. */
  onUnreachable: (channel: OutboundChannel) => void;
}

/**
 * Everything this node sends to one peer: one long-lived stream reused for every frame
 * (negotiating a stream costs several times a frame's round trip) behind a FIFO queue that
 * waits for the stream to drain instead of piling bytes into the muxer.
 *
 * A write resolves once its frame is handed to the stream; the protocol has no
 * acknowledgements, so replies, not writes, confirm delivery.
 */
export class OutboundChannel {
  private stream?: Stream;
  private readonly queue: PendingWrite[] = [];
  private queuedBytes = 0;
  private pumping = false;
  private closedWith?: DmsError;

  constructor(
    readonly peer: string,
    private readonly opts: ChannelOptions,
  ) {}

  write(frame: Uint8Array): Promise<void> {
    if (this.closedWith) return Promise.reject(this.closedWith);
    if (this.queuedBytes + frame.byteLength > this.opts.maxQueuedBytes) {
      return Promise.reject(
        new DmsError(
          'overloaded',
          `${this.queuedBytes} bytes are already waiting for peer ${this.peer} (limit ${this.opts.maxQueuedBytes})`,
          { retryAfter: 1 },
        ),
      );
    }
    const { total } = this.opts;
    if (total.held + frame.byteLength > total.limit && this.queuedBytes >= MAX_BATCH_BYTES) {
      return Promise.reject(
        new DmsError('overloaded', `${total.held} bytes are waiting for peers (limit ${total.limit}), ${this.queuedBytes} of them for peer ${this.peer}`, { retryAfter: 1 }),
      );
    }
    return new Promise<void>((resolve, reject) => {
      this.queue.push({ frame, resolve, reject });
      this.count(frame.byteLength);
      if (!this.pumping) void this.pump();
    });
  }

  private count(bytes: number): void {
    this.queuedBytes += bytes;
    this.opts.total.held += bytes;
  }

  /** Rejects what is still queued with `reason`, closes the stream and refuses further writes. */
  async close(reason: DmsError): Promise<void> {
    if (this.closedWith) return;
    this.closedWith = reason;
    this.rejectQueued(reason);
    const stream = this.stream;
    this.stream = undefined;
    if (!stream) return;
    try {
      await stream.close({ signal: AbortSignal.timeout(CLOSE_FLUSH_MS) });
    } catch {
      stream.abort(reason);
    }
  }

  private async pump(): Promise<void> {
    this.pumping = true;
    // A stream that died between two writes fails the next send before any byte leaves,
    // so that batch goes again on a fresh stream; a second failure in a row is real.
    let retried = false;
    try {
      while (this.queue.length > 0 && !this.closedWith) {
        let stream: Stream;
        try {
          stream = await this.currentStream();
        } catch (e) {
          this.rejectQueued(asUnroutable(e, this.peer));
          this.opts.onUnreachable(this);
          retried = false;
          continue;
        }
        const batch = this.takeBatch();
        let ready: boolean;
        try {
          ready = stream.send(batch.length === 1 ? batch[0].frame : Buffer.concat(batch.map((w) => w.frame)));
        } catch (e) {
          this.dropStream(stream);
          if (retried) {
            const err = new DmsError('unroutable', `stream to peer ${this.peer} failed: ${errorText(e)}`, { cause: e });
            for (const w of batch) w.reject(err);
          } else {
            this.requeue(batch);
          }
          retried = !retried;
          continue;
        }
        retried = false;
        for (const w of batch) w.resolve();
        if (!ready) await this.drained(stream);
      }
    } finally {
      this.pumping = false;
    }
  }

  /** Waits until `stream` takes more; one that takes nothing for the stall time is aborted and what waits for it refused. */
  private async drained(stream: Stream): Promise<void> {
    const stallMs = this.opts.stallMs ?? DEFAULT_STALL_MS;
    const stall = AbortSignal.timeout(stallMs);
    try {
      await stream.onDrain({ signal: stall });
    } catch {
      this.dropStream(stream);
      if (!stall.aborted) return;
      const err = new DmsError('unavailable', `peer ${this.peer} took nothing sent to it for ${stallMs} ms`);
      stream.abort(err);
      this.rejectQueued(err);
    }
  }

  private async currentStream(): Promise<Stream> {
    if (this.stream?.writeStatus === 'writable') return this.stream;
    const stream = await this.opts.open();
    if (this.closedWith) {
      stream.abort(this.closedWith);
      throw this.closedWith;
    }
    stream.addEventListener('close', () => this.dropStream(stream), { once: true });
    this.stream = stream;
    return stream;
  }

  private dropStream(stream: Stream): void {
    if (this.stream === stream) this.stream = undefined;
  }

  private takeBatch(): PendingWrite[] {
    let bytes = 0;
    let n = 0;
    while (n < this.queue.length && (n === 0 || bytes + this.queue[n].frame.byteLength <= MAX_BATCH_BYTES)) {
      bytes += this.queue[n].frame.byteLength;
      n++;
    }
    this.count(-bytes);
    return this.queue.splice(0, n);
  }

  private requeue(batch: PendingWrite[]): void {
    this.queue.unshift(...batch);
    for (const w of batch) this.count(w.frame.byteLength);
  }

  private rejectQueued(err: DmsError): void {
    const pending = this.queue.splice(0);
    this.count(-this.queuedBytes);
    for (const w of pending) w.reject(err);
  }
}

const asUnroutable = (e: unknown, peer: string): DmsError =>
  isDmsError(e) ? e : new DmsError('unroutable', `cannot open a stream to peer ${peer}: ${errorText(e)}`, { cause: e });

export interface ChannelLimits {
  /** Bytes that may wait for one peer (ChannelOptions.maxQueuedBytes). */
  maxQueuedBytes: number;
  /** Bytes that may wait over every peer (QueuedBytes). */
  maxTotalQueuedBytes: number;
  stallMs?: number;
}

/**
 * A transport's channels: one per peer, made on the first send to it and forgotten once it
 * cannot reach its peer or the peer's connection is gone, all sharing one bound on what waits.
 */
export class OutboundChannels {
  private readonly byPeer = new Map<string, OutboundChannel>();
  private readonly total: QueuedBytes;

  /**
   * `opener` runs when a channel to a peer is made (it may throw for a peer that cannot be
   * dialled) and gives what opens a stream to it.
   */
  constructor(
    private readonly limits: ChannelLimits,
    private readonly opener: (peer: string) => () => Promise<Stream>,
  ) {
    this.total = new QueuedBytes(limits.maxTotalQueuedBytes);
  }

  /** The channel to `peer`, made on the first send to it: a send on a live one allocates nothing. */
  to(peer: string): OutboundChannel {
    let channel = this.byPeer.get(peer);
    if (channel) return channel;
    channel = new OutboundChannel(peer, {
      maxQueuedBytes: this.limits.maxQueuedBytes,
      total: this.total,
      stallMs: this.limits.stallMs,
      open: this.opener(peer),
      // Destinations come from callers (REST included): a channel per unreachable peer id would grow the map without bound.
      onUnreachable: (failed) => this.forget(peer, failed),
    });
    this.byPeer.set(peer, channel);
    return channel;
  }

  /** Its stream died with the connection: refuses what waits; the next send dials again. */
  drop(peer: string, reason: DmsError): void {
    const channel = this.byPeer.get(peer);
    if (!channel) return;
    this.forget(peer, channel);
    void channel.close(reason);
  }

  async closeAll(reason: DmsError): Promise<void> {
    const all = [...this.byPeer.values()];
    this.byPeer.clear();
    await Promise.all(all.map((c) => c.close(reason)));
  }

  private forget(peer: string, channel: OutboundChannel): void {
    if (this.byPeer.get(peer) === channel) this.byPeer.delete(peer);
  }
}
