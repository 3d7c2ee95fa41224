/**
 * `/dms/blocks/1.0.0`: blocks between nodes over the node's own libp2p (README "Job outputs").
 * A stream carries one exchange: the asker sends one frame holding a JSON want-list
 * (`{"want": ["<cid>", …]}`, at most MAX_WANT CIDs), the holder answers each CID in order
 * with one frame, `0x01 ‖ cid bytes ‖ block` when it has it or `0x00 ‖ cid bytes` when not,
 * then closes. Frames are length-prefixed (an unsigned varint, as the actor protocol's).
 *
 * Blocks are public by CID: any node may ask for any block held here. What arrives is a
 * stranger's until checked: a block not asked for, one already answered, or anything after
 * the last answer ends the exchange; a block whose bytes do not hash to its CID is dropped.
 * Either way the sender is noted, and one noted MAX_STRIKES times is not asked again. A holder
 * whose exchange brings no answer for the stall time is given up for the next one and asked
 * last for a while (SLOW_FOR_MS), as is one whose exchange runs into its timeout.
 */
import type { Connection, Stream } from '@libp2p/interface';
import { peerIdFromString } from '@libp2p/peer-id';
import * as dagPb from '@ipld/dag-pb';
import { CID } from 'multiformats/cid';
import { DmsError, errorText } from '../errors.js';
import { parseUntrustedJson } from '../json.js';
import type { Logger } from '../log.js';
import { cidProblem, DAG_PB_CODEC } from '../blocks/cid.js';
import { MAX_BLOCK_BYTES, type BlockStore } from '../blocks/store.js';
import { encodeBytesFrame as frame, encodeFrameStart, frameDecoder } from './frames.js';
import type { DmsLibp2p } from './host.js';
import { ExchangeHold, ServeBudget } from './serve-budget.js';

export const BLOCKS_PROTOCOL = '/dms/blocks/1.0.0';
/** Most CIDs one want-list names: the blocks one exchange may have in flight. */
export const MAX_WANT = 256;
/** A want-list of MAX_WANT CIDs as text fits well within this. */
const MAX_WANT_FRAME = 64 * 1024;
/** Wrong or unasked blocks a peer may send before it is not asked again. */
export const MAX_STRIKES = 3;
/**
 * Blocks in flight from one node by default (`blocks.fetch_in_flight`): 64 per exchange. Each
 * exchange is a new stream whose muxer window starts small, so short want-lists (16 each, at
 * 64) kept windows from growing and fetched at 0.4-0.7x a raw stream; 64 per exchange holds
 * the ratio nearer the raw stream's, and at most 64 MiB of blocks in flight.
 */
export const DEFAULT_IN_FLIGHT = 256;
/**
 * How long an exchange may bring no answer (a block, or "not here") by default
 * (`blocks.exchange_stall_ms`): a holder that answers each exchange just within the exchange's
 * timeout (60 s) otherwise holds a fetch a minute per exchange while another node has the
 * blocks. Ample for one block of 1 MiB at 100 KB/s.
 */
export const DEFAULT_STALL_MS = 10_000;
/**
 * How long a holder that stalled an exchange is asked after the others. Not ended by an exchange
 * it completes: one that alternates would cost every other fetch a stall.
 */
const SLOW_FOR_MS = 10 * 60_000;
/** Exchanges with one peer at once within one fetch. */
const PARALLEL = 4;
/** Most blocks of a DAG's level asked for before the bytes fetched are held to a bound: all in flight at once (PARALLEL × 256). */
const MAX_SLICE = 1024;
/**
 * Blocks a server reads from disk ahead of the one it sends: the next reads overlap the
 * sending (encryption, the muxer's window), which otherwise waited for each read in turn.
 */
const READ_AHEAD = 8;
/**
 * Bytes of blocks the server holds read and unsent over all it serves, by default
 * (`blocks.serve_buffer_bytes`; ServeBudget): an honest fetch at full speed holds about 9 MiB
 * of 256 KiB blocks (4 exchanges, 8 blocks read ahead each, and the one being sent).
 */
export const DEFAULT_SERVE_BUFFER = 64 * 1024 * 1024;
/** Most holders of a DAG the DHT is asked for, and how long that may take. */
const MAX_PROVIDERS = 8;
const FIND_PROVIDERS_MS = 5_000;
/** How long announcing a DAG to the DHT may take (it goes on in the background). */
const ANNOUNCE_MS = 30_000;
const HAVE = 0x01;
/** The flag and a CIDv1 sha2-256 (version, codec, hash code and length, 32 bytes) fit well within this. */
const HEAD_BYTES = 64;
const DONT_HAVE = 0x00;

export interface BlockExchangeOptions {
  /** CIDs asked of one peer per exchange (`blocks.fetch_in_flight`): at most this many blocks are in flight from it. */
  inFlight?: number;
  /** Exchanges this node serves at once per connection. */
  maxInboundStreams?: number;
  /** Bytes of blocks held read and unsent over every exchange served (DEFAULT_SERVE_BUFFER; at least two blocks). */
  serveBufferBytes?: number;
  /** How long one exchange may take before it is given up. */
  timeoutMs?: number;
  /** How long an exchange may bring no answer before it is given up and its holder asked last (DEFAULT_STALL_MS). */
  stallMs?: number;
  log?: Logger;
}

export interface BlockStats {
  /** Blocks fetched from other nodes and stored (each checked against its CID). */
  fetched: number;
  /** Blocks sent to other nodes. */
  served: number;
  /** Blocks refused on arrival: wrong bytes, not asked for, or after the last answer. */
  rejected: number;
  /** Holders found through the DHT for a DAG the peers named did not have whole. */
  found: number;
}

/** `drained` waits until the stream takes more (by default, as long as that takes). */
async function send(stream: Stream, data: Uint8Array, drained: () => Promise<void> = () => stream.onDrain()): Promise<void> {
  if (!stream.send(data)) await drained();
}

/**
 * One frame of `head ‖ body`, the body written as it is: no copy of a block into its frame.
 * `queued` is told once the stream has the body, before waiting for it to drain.
 */
async function sendFrame(stream: Stream, head: Uint8Array, body: Uint8Array, queued: () => void, drained: () => Promise<void>): Promise<void> {
  if (!stream.send(encodeFrameStart(head, body.byteLength))) await drained();
  const more = stream.send(body);
  queued();
  if (!more) await drained();
}

export class BlockExchange {
  readonly stats: BlockStats = { fetched: 0, served: 0, rejected: 0, found: 0 };
  /** What the exchanges served here hold of blocks read and unsent, over all of them. */
  readonly serving: ServeBudget;
  private readonly strikes = new Map<string, number>();
  /** Holders that let an exchange stall, and until when they are asked after the others. */
  private readonly slow = new Map<string, number>();
  private readonly inFlight: number;
  private readonly timeoutMs: number;
  private readonly stallMs: number;

  constructor(
    private readonly node: DmsLibp2p,
    private readonly store: BlockStore,
    private readonly opts: BlockExchangeOptions = {},
  ) {
    this.inFlight = Math.min(MAX_WANT, opts.inFlight ?? DEFAULT_IN_FLIGHT);
    this.timeoutMs = opts.timeoutMs ?? 60_000;
    this.stallMs = Math.min(this.timeoutMs, opts.stallMs ?? DEFAULT_STALL_MS);
    this.serving = new ServeBudget(Math.max(2 * MAX_BLOCK_BYTES, opts.serveBufferBytes ?? DEFAULT_SERVE_BUFFER));
  }

  async start(): Promise<void> {
    await this.node.handle(BLOCKS_PROTOCOL, (stream, connection) => void this.serve(stream, connection), { maxInboundStreams: this.opts.maxInboundStreams ?? 8 });
  }

  async stop(): Promise<void> {
    await this.node.unhandle(BLOCKS_PROTOCOL);
  }

  /** How often `peer` sent a wrong or unasked block. */
  strikesOf(peer: string): number {
    return this.strikes.get(peer) ?? 0;
  }

  /** Whether `peer` let an exchange stall lately: it is asked after the others. */
  isSlow(peer: string): boolean {
    const until = this.slow.get(peer);
    if (until !== undefined && until <= Date.now()) this.slow.delete(peer);
    return until !== undefined && until > Date.now();
  }

  private noteSlow(peer: string): void {
    const now = Date.now();
    for (const [p, until] of this.slow) if (until <= now) this.slow.delete(p);
    this.slow.set(peer, now + SLOW_FOR_MS);
    this.opts.log?.warn({ peer, stallMs: this.stallMs }, 'block exchange: holder stalled, asked last for a while');
  }

  private note(peer: string, why: string): void {
    this.stats.rejected++;
    this.strikes.set(peer, this.strikesOf(peer) + 1);
    this.opts.log?.warn({ peer, why, strikes: this.strikesOf(peer) }, 'block exchange: peer sent a bad block');
  }

  /** Answers one want-list; a malformed one ends the stream. */
  private async serve(stream: Stream, connection: Connection): Promise<void> {
    const decoder = frameDecoder(MAX_WANT_FRAME);
    // Room for each block is taken before it is read, as large as a block may be.
    const hold = new ExchangeHold(this.serving, connection.remotePeer.toString(), MAX_BLOCK_BYTES);
    // A wait for room ends with the stream (timed out, reset by the asker).
    const gone = new AbortController();
    const onClose = () => gone.abort(new DmsError('unavailable', 'block exchange closed'));
    // What the asker took of the blocks sent is no longer held here. A drain is looked at once
    // the stream has sent what the new window allows, which it does a microtask later.
    const onFlushed = () => hold.flushed(stream.writeBufferLength);
    const onDrained = () => queueMicrotask(onFlushed);
    stream.addEventListener('close', onClose);
    stream.addEventListener('drain', onDrained);
    stream.addEventListener('idle', onFlushed);
    // An asker that takes nothing for the stall time gives back the room its blocks hold: else a
    // few dozen such askers, each holding a block, kept new peers waiting for the exchange's timeout.
    const drained = async () => {
      const stall = AbortSignal.timeout(this.stallMs);
      try {
        await stream.onDrain({ signal: stall });
      } catch (e) {
        throw stall.aborted ? new DmsError('timeout', `the asker took nothing for ${this.stallMs} ms`) : e;
      }
    };
    // An asker that never sends its want-list does not hold a slot for ever.
    const timer = setTimeout(() => stream.abort(new DmsError('timeout', `block exchange not over within ${this.timeoutMs} ms`)), this.timeoutMs);
    try {
      let want: unknown;
      for await (const chunk of stream) {
        const [first] = [...decoder.decode(chunk)];
        if (first) {
          want = parseUntrustedJson(Buffer.from(first.subarray()).toString('utf8'), 'the want-list');
          break;
        }
      }
      const list = (want as { want?: unknown })?.want;
      if (!Array.isArray(list) || list.length > MAX_WANT || list.some((c) => typeof c !== 'string')) {
        throw new DmsError('invalid', `a want-list is {"want": [at most ${MAX_WANT} CIDs]}`);
      }
      // Every CID checked before any block is read: a bad list costs no disk.
      const cids = (list as string[]).map((text) => {
        const cid = CID.parse(text);
        if (cidProblem(cid)) throw new DmsError('invalid', `want-list: ${text}: ${cidProblem(cid)}`);
        return cid;
      });
      // Each block once, however its CID is written: one CID named MAX_WANT times was read and sent as often, 64 MiB for one.
      if (new Set(cids.map(String)).size !== cids.length) throw new DmsError('invalid', 'a want-list names each CID once');
      const reads: (Promise<Uint8Array | null> | undefined)[] = [];
      // Only once its room is taken.
      const read = (i: number) => {
        const block = this.store.get(cids[i]).then(
          (b) => (hold.read(b.byteLength), b),
          (e: unknown) => {
            hold.read(0);
            if (e instanceof DmsError && e.kind === 'not_found') return null;
            throw e;
          },
        );
        // A read ahead that failed is seen when its turn comes.
        block.catch(() => undefined);
        reads[i] = block;
      };
      for (let i = 0; i < cids.length; i++) {
        if (!reads[i]) {
          await hold.reserve(gone.signal);
          read(i);
        }
        // Ahead while there is room now, in order: a block not read ahead is waited for in its turn.
        for (let j = i + 1; j < Math.min(cids.length, i + READ_AHEAD) && (reads[j] || hold.tryReserve()); j++) if (!reads[j]) read(j);
        const block = await reads[i]!;
        reads[i] = undefined; // its bytes are not kept once sent
        if (block) {
          // The header and the block go as they are: no copy of the block into one frame.
          await sendFrame(stream, Buffer.concat([Uint8Array.of(HAVE), cids[i].bytes]), block, () => hold.sent(block.byteLength, stream.writeBufferLength), drained);
          this.stats.served++;
        } else {
          await send(stream, frame(Uint8Array.of(DONT_HAVE), cids[i].bytes), drained);
        }
      }
      // Its last blocks taken, or not within the stall time: the same asker either way.
      await stream.close({ signal: AbortSignal.timeout(this.stallMs) });
    } catch (e) {
      stream.abort(e instanceof Error ? e : new Error(errorText(e)));
    } finally {
      clearTimeout(timer);
      hold.end();
      stream.removeEventListener('close', onClose);
      stream.removeEventListener('drain', onDrained);
      stream.removeEventListener('idle', onFlushed);
    }
  }

  /**
   * Asks `peer` for `cids` (at most MAX_WANT) and stores each block that checks out. Resolves
   * with the CIDs it did not give (it lacks them, or sent them wrong); rejects when it cannot be
   * reached or breaks the protocol.
   */
  async ask(peer: string, cids: readonly CID[], signal?: AbortSignal): Promise<CID[]> {
    if (cids.length > MAX_WANT) throw new DmsError('invalid', `at most ${MAX_WANT} blocks per want-list`);
    const timeout = AbortSignal.timeout(this.timeoutMs);
    // Restarted by every answer: bytes alone are no progress, or a holder trickling one frame
    // would hold the exchange to its timeout.
    const stalled = new AbortController();
    let stall: NodeJS.Timeout | undefined;
    const progress = () => {
      clearTimeout(stall);
      stall = setTimeout(() => stalled.abort(new DmsError('timeout', `peer ${peer} sent no answer for ${this.stallMs} ms`)), this.stallMs);
    };
    const abort = AbortSignal.any([...(signal ? [signal] : []), timeout, stalled.signal]);
    const waiting = new Map(cids.map((c) => [c.toString(), c]));
    const missing: CID[] = [];
    const checks: Promise<void>[] = [];
    const decoder = frameDecoder(MAX_BLOCK_BYTES + 128);
    let stream: Stream | undefined;
    const onAbort = () => stream?.abort(stalled.signal.aborted ? (stalled.signal.reason as Error) : new DmsError('unavailable', `block exchange with ${peer} aborted`));
    abort.addEventListener('abort', onAbort, { once: true });
    try {
      stream = await this.node.dialProtocol(peerIdFromString(peer), BLOCKS_PROTOCOL, { signal: abort });
      // Aborted as the dial resolved: onAbort found no stream to end.
      abort.throwIfAborted();
      progress();
      await send(stream, frame(Buffer.from(JSON.stringify({ want: cids.map(String) }))));
      for await (const chunk of stream) {
        for (const f of decoder.decode(chunk)) {
          progress();
          if (waiting.size === 0) {
            this.note(peer, 'sent more than it was asked for');
            throw new DmsError('invalid', `peer ${peer} sent blocks past its last answer`);
          }
          // The flag and the CID are copied out (a few dozen bytes); the block stays in the pieces it came in.
          const head = f.subarray(0, Math.min(f.byteLength, HEAD_BYTES));
          let cid: CID;
          let rest: Uint8Array;
          try {
            [cid, rest] = CID.decodeFirst(head.subarray(1));
          } catch {
            this.note(peer, 'sent a frame without a CID');
            throw new DmsError('invalid', `peer ${peer} sent a frame without a CID`);
          }
          const key = cid.toString();
          if (!waiting.has(key)) {
            this.note(peer, `sent ${key}, which was not asked for`);
            throw new DmsError('invalid', `peer ${peer} sent block ${key}, which was not asked for`);
          }
          waiting.delete(key);
          if (head[0] !== HAVE) {
            missing.push(cid);
            continue;
          }
          // Checked and written while the next blocks arrive: at most one want-list's blocks are held.
          checks.push(
            this.store.putVerifiedChunks(cid, [...f.sublist(head.byteLength - rest.byteLength)]).then((ok) => {
              if (ok) this.stats.fetched++;
              else {
                this.note(peer, `sent bytes that are not block ${key}`);
                missing.push(cid);
              }
            }),
          );
        }
      }
      await Promise.all(checks);
      if (waiting.size > 0) throw new DmsError('unavailable', `peer ${peer} ended the exchange with ${waiting.size} blocks unanswered`);
      // Our side too: a stream left half open still counts against the protocol's stream limit.
      await stream.close({ signal: abort });
      return missing;
    } catch (e) {
      stream?.abort(e instanceof Error ? e : new Error(errorText(e)));
      await Promise.allSettled(checks);
      if (signal?.aborted) throw e;
      // A holder that trickles answers, each within the stall time, runs into the exchange's
      // timeout instead: asked first again, it would cost every fetch that timeout.
      if (stalled.signal.aborted || timeout.aborted) {
        this.noteSlow(peer);
        throw stalled.signal.aborted ? stalled.signal.reason : new DmsError('timeout', `peer ${peer} did not answer ${cids.length} blocks within ${this.timeoutMs} ms`);
      }
      throw e;
    } finally {
      clearTimeout(stall);
      abort.removeEventListener('abort', onAbort);
    }
  }

  /**
   * Makes every block of the DAG under `root` held here, asking `peers` in turn for what is
   * missing, level by level (a node's links are known once it is held). Blocks already held are
   * not asked for again, so an interrupted fetch resumes where it stopped. Rejects naming a block
   * no peer gave, and `too_large` once its distinct blocks hold more than `maxBytes`; resolves
   * with the bytes they hold when bounded (0 otherwise).
   */
  async fetchDag(root: CID, peers: readonly string[], signal?: AbortSignal, maxBytes = Number.POSITIVE_INFINITY): Promise<number> {
    // Asked of the DHT once, when the peers named lack a block: whoever announced the DAG.
    let found: string[] | undefined;
    const fetchSome = async (missing: CID[]) => {
      try {
        await this.fetchAll(missing, peers, signal);
      } catch (e) {
        // Not held by the nodes asked, or none of them reachable: the DHT may name another holder.
        if (!(e instanceof DmsError && (e.kind === 'not_found' || e.kind === 'unavailable')) || signal?.aborted) throw e;
        found ??= await this.holders(root, peers, signal);
        if (found.length === 0) throw e;
        await this.fetchAll(await this.missing(missing), found, signal);
      }
    };
    // Each block once: links that repeat one block (a few blocks can name a file of any size)
    // cost one visit, and the bound counts the bytes of distinct blocks, as the disk holds them.
    const seen = new Set<string>([root.toString()]);
    // Measured only when bounded: a block's size is a stat of its file.
    const bounded = Number.isFinite(maxBytes);
    let bytes = 0;
    let level: CID[] = [root];
    while (level.length > 0) {
      // In slices no larger than what is left of the bound allows, so it is checked as blocks
      // come, overshot by one block at most, not after a whole level of them.
      for (let i = 0; i < level.length; ) {
        const room = Math.floor((maxBytes - bytes) / MAX_BLOCK_BYTES);
        const slice = level.slice(i, i + Math.min(MAX_SLICE, Math.max(1, room)));
        i += slice.length;
        const missing = await this.missing(slice);
        if (missing.length > 0) await fetchSome(missing);
        if (!bounded) continue;
        for (const cid of slice) bytes += await this.store.sizeOf(cid);
        if (bytes > maxBytes) throw new DmsError('too_large', `the DAG under ${root} holds more than ${maxBytes} bytes of blocks`);
      }
      const next: CID[] = [];
      for (const cid of level) {
        if (cid.code !== DAG_PB_CODEC) continue;
        for (const link of dagPb.decode(await this.store.get(cid)).Links) {
          const problem = cidProblem(link.Hash);
          if (problem) throw new DmsError('invalid', `block ${cid} links to ${link.Hash}: ${problem}`);
          const key = link.Hash.toString();
          if (seen.has(key)) continue;
          seen.add(key);
          next.push(link.Hash);
        }
      }
      level = next;
    }
    // On the disk by name before the fetch is done (runtime/blocks/store.ts).
    await this.store.syncDirs();
    // Held whole now: this node can serve it too.
    this.announce(root);
    return bytes;
  }

  /**
   * Tells the network (the DHT the node runs) that this node holds the whole DAG under `root`,
   * in the background: a failure (no peer to store the record yet) costs nothing but the hint.
   * Blocks are public by CID, so the announcement reveals only that this node has them.
   */
  announce(root: CID): void {
    this.node.contentRouting.provide(root, { signal: AbortSignal.timeout(ANNOUNCE_MS) }).catch((e: unknown) => {
      this.opts.log?.debug({ cid: root.toString(), err: errorText(e) }, 'DAG not announced');
    });
  }

  /** The CIDs of `cids` not held here, in order (a look-up is a stat of a cached directory entry: store.has). */
  private async missing(cids: readonly CID[]): Promise<CID[]> {
    const out: CID[] = [];
    for (const cid of cids) if (!(await this.store.has(cid))) out.push(cid);
    return out;
  }

  /** Up to MAX_PROVIDERS nodes the DHT names as holding `root`, other than this node and those already asked. */
  private async holders(root: CID, asked: readonly string[], signal?: AbortSignal): Promise<string[]> {
    const self = this.node.peerId.toString();
    const found: string[] = [];
    const bounded = signal ? AbortSignal.any([signal, AbortSignal.timeout(FIND_PROVIDERS_MS)]) : AbortSignal.timeout(FIND_PROVIDERS_MS);
    try {
      for await (const provider of this.node.contentRouting.findProviders(root, { signal: bounded })) {
        const id = provider.id.toString();
        if (id === self || asked.includes(id) || found.includes(id) || this.strikesOf(id) >= MAX_STRIKES) continue;
        // Its addresses come with the record: kept so the block protocol can dial it.
        if (provider.multiaddrs.length > 0) await this.node.peerStore.merge(provider.id, { multiaddrs: provider.multiaddrs }).catch(() => undefined);
        found.push(id);
        if (found.length >= MAX_PROVIDERS) break;
      }
    } catch (e) {
      if (signal?.aborted) throw e;
      this.opts.log?.debug({ cid: root.toString(), err: errorText(e) }, 'DHT gave no more holders');
    }
    this.stats.found += found.length;
    return found;
  }

  /** Fetches `cids` in want-lists of `inFlight`, one exchange at a time per peer. */
  private async fetchAll(cids: CID[], peers: readonly string[], signal?: AbortSignal): Promise<void> {
    let left = cids;
    const errors: string[] = [];
    /** Peers that answered and lacked some of what was asked. */
    const lacking: string[] = [];
    // In the order given, those that stalled an exchange last.
    const order = [...peers.filter((p) => !this.isSlow(p)), ...peers.filter((p) => this.isSlow(p))];
    for (const peer of order) {
      if (left.length === 0) return;
      if (this.strikesOf(peer) >= MAX_STRIKES) {
        errors.push(`${peer} is not asked (it sent ${this.strikesOf(peer)} bad blocks)`);
        continue;
      }
      const stillMissing: CID[] = [];
      try {
        // PARALLEL exchanges at once, their want-lists sharing the bound: one block's disk
        // read, check and write overlap another's transfer, and no more are in flight than asked.
        const per = Math.max(1, Math.ceil(this.inFlight / PARALLEL));
        const lists: CID[][] = [];
        for (let i = 0; i < left.length; i += per) lists.push(left.slice(i, i + per));
        let next = 0;
        // One exchange failing ends the others with this peer: what is left is asked of the next.
        const round = new AbortController();
        const bound = signal ? AbortSignal.any([signal, round.signal]) : round.signal;
        const worker = async () => {
          while (next < lists.length) {
            bound.throwIfAborted();
            stillMissing.push(...(await this.ask(peer, lists[next++], bound)));
          }
        };
        const workers = Array.from({ length: Math.min(PARALLEL, this.inFlight, lists.length) }, worker);
        try {
          await Promise.all(workers);
        } catch (e) {
          round.abort(e);
          await Promise.allSettled(workers);
          throw e;
        }
        left = stillMissing;
        if (stillMissing.length > 0) lacking.push(peer);
      } catch (e) {
        if (signal?.aborted) throw e;
        errors.push(`${peer}: ${errorText(e)}`);
        // What it did give is held now; the rest is asked of the next peer.
        left = await this.missing(left);
      }
    }
    if (left.length > 0) {
      const what = `block ${left[0]}${left.length > 1 ? ` and ${left.length - 1} more` : ''}`;
      const why = [...lacking.map((p) => `${p}: does not hold it`), ...errors].join('; ');
      // No node asked said it lacks them: they may well be there, on a node that is down now.
      if (lacking.length === 0 && errors.length > 0) throw new DmsError('unavailable', `${what} could not be fetched: no node that may hold it answered (${why})`);
      throw new DmsError('not_found', `${what} not found on ${peers.length ? 'the nodes asked' : 'any node'}${why ? ` (${why})` : ''}`);
    }
  }
}
