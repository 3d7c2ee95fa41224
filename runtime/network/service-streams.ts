/**
 * Inbound streams of libp2p's own services that carry length-prefixed messages (gossipsub's
 * RPCs, the DHT's messages), held to the same clocks and node budget as the actor protocol's
 * frames (partial-frames.ts). Their readers keep a message's bytes until its last arrives and
 * bound only its size (4 MiB each): gossipsub without any clock, so each throwaway identity
 * could hold 4 MiB of a node for as long as it stayed connected (24 of them: +180 MB); the DHT
 * for 10 s, on up to 32 streams a connection (24 identities, 8 streams of 3 MiB each: +670 MB).
 *
 * The bytes are only counted here, as they pass to the service's own reader: where each message
 * begins and ends, from its varint length prefix.
 */
import type { Connection, Stream, StreamHandler } from '@libp2p/interface';
import type { Libp2p } from 'libp2p';
import { DmsError } from '../errors.js';
import { PARTIAL_ENDS, type PartialEnd, type PartialFrames } from './partial-frames.js';

/** Counts how much of a length-prefixed message a stream holds, without keeping its bytes. */
export class MessageCounter {
  /** Bytes of the message now arriving, its prefix included; 0 between messages. */
  held = 0;
  /** Body bytes of that message still to come; 0 while its prefix is read. */
  private remaining = 0;
  private length = 0;
  private shift = 0;

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

export type ServiceStreamGivenUp = (peer: string, protocol: string, why: PartialEnd) => void;

/**
 * From now on, inbound streams of `protocols` that the services of `node` register (when it
 * starts) count what they hold of a message not yet whole against `partials`; a stream whose
 * message is given up is reset, and `gaveUp` told. Call before `node.start()`.
 */
export function watchServiceStreams(node: Libp2p, protocols: (protocol: string) => boolean, partials: PartialFrames, gaveUp?: ServiceStreamGivenUp): void {
  // Services register their protocols with the registrar itself, not through node.handle.
  const registrar = (node as unknown as { components: { registrar: { handle(protocol: string, handler: StreamHandler, opts?: unknown): Promise<void> } } }).components.registrar;
  const handle = registrar.handle.bind(registrar);
  registrar.handle = (protocol, handler, opts) =>
    handle(
      protocol,
      protocols(protocol)
        ? (stream: Stream, connection: Connection) => {
            watch(stream, connection.remotePeer.toString(), protocol, partials, gaveUp);
            return handler(stream, connection);
          }
        : handler,
      opts,
    );
}

function watch(stream: Stream, peer: string, protocol: string, partials: PartialFrames, gaveUp?: ServiceStreamGivenUp): void {
  const counter = new MessageCounter();
  const partial = partials.open(peer, (why) => {
    gaveUp?.(peer, protocol, why);
    stream.abort(new DmsError(why === 'budget' ? 'overloaded' : 'timeout', `${protocol} message ${PARTIAL_ENDS[why]}`));
  });
  stream.addEventListener('close', partial.close);
  stream.addEventListener('message', (evt) => {
    let began = false;
    if (evt.data instanceof Uint8Array) began = counter.read(evt.data);
    else for (const bytes of evt.data) began = counter.read(bytes) || began;
    partial.update(counter.held, began);
  });
}
