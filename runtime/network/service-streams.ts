/**
 * Inbound streams of libp2p's own services that carry length-prefixed messages (gossipsub's
 * RPCs, the DHT's messages), held to the same clocks and node budget as the actor protocol's
 * frames (partial-frames.ts). Their readers keep a message's bytes until its last arrives and
 * bound only its size (4 MiB each): gossipsub without any clock, so each throwaway identity
 * could hold 4 MiB of a node for as long as it stayed connected (24 of them: +180 MB); the DHT
 * for 10 s, on up to 32 streams a connection (24 identities, 8 streams of 3 MiB each: +670 MB).
 *
 * The bytes are only counted here, as they pass to the service's own reader: where each message
 * begins and ends, from its varint length prefix. The DHT's messages, and ping's 32-byte pings,
 * are also counted against a rate per peer and per host: each is work the node does on its one
 * event loop (~0.2 ms for an ADD_PROVIDER; an echo for a ping), and 16 identities sending DHT
 * messages as fast as they could were all served, 320,000 in 8 s, with /health taking up to
 * 2.5 s meanwhile; one peer pushing bytes through its ping streams had 966 MB echoed in 8 s.
 */
import type { Connection, Stream, StreamHandler } from '@libp2p/interface';
import type { Libp2p } from 'libp2p';
import { DmsError } from '../errors.js';
import { RateLimiter } from '../rate-limiter.js';
import { hostOf } from './inbound-share.js';
import { PARTIAL_ENDS, type PartialEnd, type PartialFrames } from './partial-frames.js';

/** Counts how much of a length-prefixed message a stream holds, without keeping its bytes. */
export class MessageCounter {
  /** Bytes of the message now arriving, its prefix included; 0 between messages. */
  held = 0;
  /** Body bytes of that message still to come; 0 while its prefix is read. */
  private remaining = 0;
  private length = 0;
  private shift = 0;

  /** Messages begun so far (a message begins with the first byte of its prefix). */
  begun = 0;

  /** Counts one read; whether a message began in it (none was held before, or one ended in it). */
  read(bytes: Uint8Array): boolean {
    let began = this.held === 0;
    for (let i = 0; i < bytes.length; ) {
      if (this.remaining > 0) {
        const take = Math.min(this.remaining, bytes.length - i);
        i += take;
        this.remaining -= take;
        this.held += take;
        if (this.remaining === 0) began = this.ended();
        continue;
      }
      const b = bytes[i++]!;
      if (this.held === 0) this.begun++;
      this.held++;
      // Past 2^53 the length is only "too long": the service's own reader refuses it.
      if (this.shift < 56) this.length += (b & 0x7f) * 2 ** this.shift;
      this.shift += 7;
      if (b & 0x80) continue;
      this.remaining = this.length;
      this.length = this.shift = 0;
      if (this.remaining === 0) began = this.ended();
    }
    return began;
  }

  private ended(): true {
    this.held = 0;
    return true;
  }
}

/** Why a stream was reset for its rate, as logged and as the reset says. */
export const RATE_EXCEEDED = 'past the rate its peer or host may send';
/** Which rate a stream went past: its peer's own, or its host's (every identity dialling from one address). */
export type RateEnd = 'rate' | 'host-rate';

/** Messages per second a peer, and every identity dialling from one host, may send on the rated protocols; five seconds' worth at once. */
export interface MessageRates {
  perPeer: number;
  perHost: number;
}

/** Buckets of MessageRates: both are taken from for each message, and either empty refuses it. */
export class MessageRateLimits {
  private readonly peers: RateLimiter;
  private readonly hosts: RateLimiter;

  constructor(rates: MessageRates) {
    this.peers = new RateLimiter(rates.perPeer, rates.perPeer * 5);
    this.hosts = new RateLimiter(rates.perHost, rates.perHost * 5);
  }

  /** Takes one message's tokens of `peer` and of `host` (none for a connection with no network address, as a relayed one); whether both had one. */
  take(peer: string, host: string | undefined, now = Date.now()): boolean {
    return this.refusal(peer, host, now) === undefined;
  }

  /** As take: undefined when both had a token, else which rate refused the message. */
  refusal(peer: string, host: string | undefined, now = Date.now()): RateEnd | undefined {
    if (this.peers.take(peer, now) > 0) return 'rate';
    return host === undefined || this.hosts.take(host, now) === 0 ? undefined : 'host-rate';
  }
}

/**
 * What one inbound stream of a rated protocol counts against its rates: each message of a
 * length-prefixed protocol (the DHT's), or each `bytes` of one that is not (ping's 32).
 */
export interface Rated {
  protocol: (protocol: string) => boolean;
  limits: MessageRateLimits;
  per: 'message' | { bytes: number };
}

export interface ServiceStreamOptions {
  /** Protocols of length-prefixed messages: what their streams hold of a message not yet whole counts against `partials`. */
  framed: (protocol: string) => boolean;
  partials: PartialFrames;
  /** Told when a stream is reset. */
  gaveUp?: ServiceStreamGivenUp;
  /** Protocols whose streams also count against rates per peer and per host. */
  rated?: Rated[];
}

export type ServiceStreamGivenUp = (peer: string, protocol: string, why: PartialEnd | RateEnd) => void;

/** Why a stream of `protocol` was reset, as logged. */
export const givenUpText = (protocol: string, why: PartialEnd | RateEnd): string =>
  `inbound ${protocol} ${why === 'rate' || why === 'host-rate' ? `messages ${RATE_EXCEEDED} (${why === 'rate' ? 'the peer' : 'its host'})` : `message ${PARTIAL_ENDS[why]}`}`;

/**
 * From now on, inbound streams that the services of `node` register (when it starts) are
 * watched: those of framed protocols count what they hold of a message not yet whole against
 * `opts.partials`, and those of rated protocols what they carry against their rates; a stream
 * whose message is given up, or that goes past a rate, is reset, and `opts.gaveUp` told. Call
 * before `node.start()`.
 */
export function watchServiceStreams(node: Libp2p, opts: ServiceStreamOptions): void {
  // Services register their protocols with the registrar itself, not through node.handle.
  const registrar = (node as unknown as { components: { registrar: { handle(protocol: string, handler: StreamHandler, opts?: unknown): Promise<void> } } }).components.registrar;
  const handle = registrar.handle.bind(registrar);
  registrar.handle = (protocol, handler, handleOpts) => {
    const framed = opts.framed(protocol);
    const rated = opts.rated?.find((r) => r.protocol(protocol));
    if (!framed && !rated) return handle(protocol, handler, handleOpts);
    return handle(
      protocol,
      (stream: Stream, connection: Connection) => {
        watch(stream, connection.remotePeer.toString(), protocol, opts, framed, rated && { ...rated, host: hostOf(connection.remoteAddr) });
        return handler(stream, connection);
      },
      handleOpts,
    );
  };
}

function watch(stream: Stream, peer: string, protocol: string, opts: ServiceStreamOptions, framed: boolean, rate?: Rated & { host: string | undefined }): void {
  const counter = new MessageCounter();
  const partial = framed
    ? opts.partials.open(peer, (why) => {
        opts.gaveUp?.(peer, protocol, why);
        stream.abort(new DmsError(why === 'budget' ? 'overloaded' : 'timeout', `${protocol} message ${PARTIAL_ENDS[why]}`));
      })
    : undefined;
  if (partial) stream.addEventListener('close', partial.close);
  let bytes = 0;
  let taken = 0;
  stream.addEventListener('message', (evt) => {
    let began = false;
    for (const chunk of evt.data instanceof Uint8Array ? [evt.data] : evt.data) {
      bytes += chunk.byteLength;
      if (framed) began = counter.read(chunk) || began;
    }
    // Taken as it arrives, before the service reads it: past the rate the stream is reset, and
    // what it had buffered goes with it, unhandled.
    const due = !rate ? 0 : rate.per === 'message' ? counter.begun : Math.ceil(bytes / rate.per.bytes);
    for (; taken < due; taken++) {
      const refused = rate!.limits.refusal(peer, rate!.host);
      if (refused === undefined) continue;
      partial?.close();
      opts.gaveUp?.(peer, protocol, refused);
      stream.abort(new DmsError('overloaded', `${protocol} messages ${RATE_EXCEEDED}`));
      return;
    }
    partial?.update(counter.held, began);
  });
}
