/**
 * Reading one inbound stream of the actor protocol: length-prefixed envelope frames (frames.ts),
 * each handed on whole, with what the stream holds of a frame not yet whole kept within the
 * node's clocks and budget (partial-frames.ts). A stream whose frames cannot be read, or whose
 * partial frame is given up, is reset.
 */
import type { Stream } from '@libp2p/interface';
import { DmsError, errorText } from '../errors.js';
import { stageStart } from '../stage-timings.js';
import { frameDecoder } from './frames.js';
import { PARTIAL_ENDS, type PartialEnd, type PartialFrames } from './partial-frames.js';

export interface ActorStreamReader {
  maxFrameBytes: number;
  partials: PartialFrames;
  /** Whether the peer is banned now: what its stream still carries is not read. */
  banned(): boolean;
  /** One whole frame, and when the read that completed it began (stage timings, when timed). */
  frame(bytes: Uint8Array, at: number | undefined): void;
  /** The stream is reset: its partial frame was given up, or a length prefix was unreadable. */
  gaveUp(why: PartialEnd | 'unreadable', text: string): void;
}

export function readActorStream(stream: Stream, peer: string, r: ActorStreamReader): void {
  const decoder = frameDecoder(r.maxFrameBytes);
  const partial = r.partials.open(peer, (why) => {
    r.gaveUp(why, `inbound frame ${PARTIAL_ENDS[why]}`);
    stream.abort(new DmsError(why === 'budget' ? 'overloaded' : 'timeout', `frame ${PARTIAL_ENDS[why]}`));
  });
  stream.addEventListener('close', partial.close);
  stream.addEventListener('message', (evt) => {
    if (r.banned()) return stream.abort(new DmsError('forbidden', `peer ${peer} is banned for undecodable frames`));
    const at = stageStart();
    try {
      let began = decoder.buffered === 0;
      for (const frame of decoder.decode(evt.data)) {
        began = true;
        r.frame(frame.subarray(), at);
      }
      partial.update(decoder.buffered, began);
    } catch (e) {
      // The length prefix is all a receiver can trust about where frames start; past a bad
      // one the rest of the stream is unreadable, so it goes.
      r.gaveUp('unreadable', `unreadable inbound frame (its length prefix): ${errorText(e)}`);
      stream.abort(e instanceof DmsError ? e : new DmsError('too_large', `frame over the ${r.maxFrameBytes}-byte limit`));
    }
  });
  // The sender closed its side; closing ours frees the stream at both ends.
  stream.addEventListener('remoteCloseWrite', () => {
    stream.close().catch((e: unknown) => stream.abort(e instanceof Error ? e : new Error(String(e))));
  });
}
