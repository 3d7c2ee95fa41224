/**
 * A container's output, copied into its job's log: followed while the container runs, then read
 * once more after it exits. The engine may end a follow when the container exits before the
 * last frames of its output reached the engine's log (testcontainers-java#1205: a short-lived
 * container's follow ended empty while its log, read later, had the line), so the follow alone
 * can lose the end of a job's output. The second read asks for what came since a second before
 * the last frame followed (the engine's `since` counts whole seconds) and appends, of each
 * stream, only frames newer than the last of that stream followed, by the engine's own
 * nanosecond timestamps: nothing twice, nothing lost. Per stream, because the engine stamps
 * each stream as its own copier reads it: in the log, a stderr frame may follow a stdout frame
 * stamped after it, never one of its own stream.
 */
import { Readable, Writable } from 'node:stream';
import { StringDecoder } from 'node:string_decoder';
import type Docker from 'dockerode';
import type { LogChunk } from '../../behaviors/jobs/execution.js';
import { settledWithin } from '../../runtime/deadline.js';
import { answered, ENGINE_ANSWER_MS, EngineSilent, heard } from './engine.js';
import type { LogWriter } from './logfile.js';

type Stream = LogChunk['stream'];

/** Nanoseconds since the epoch of an engine timestamp (RFC 3339 with up to 9 fraction digits), or null. */
export function timestampNs(text: string): bigint | null {
  const m = /^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d{1,9}))?(Z|[+-]\d\d:\d\d)$/.exec(text);
  if (!m) return null;
  const ms = Date.parse(`${m[1]}${m[3]}`);
  if (Number.isNaN(ms)) return null;
  return BigInt(ms) * 1_000_000n + BigInt((m[2] ?? '').padEnd(9, '0'));
}

export class ContainerOutput {
  private readonly decoders: Record<Stream, StringDecoder> = { stdout: new StringDecoder('utf8'), stderr: new StringDecoder('utf8') };
  /** Per stream, the newest frame appended, and how many of its frames had exactly that timestamp. */
  private readonly last: Record<Stream, { ns: bigint; count: number } | null> = { stdout: null, stderr: null };
  /** The timestamp of the last frame followed, of either stream. */
  private lastFollowed: bigint | null = null;
  /** While reading again: per stream, how many frames at its `last` timestamp the follow appended. */
  private catchingUp: Record<Stream, number> | null = null;
  /** The follow's stream while the engine feeds it. */
  private following: NodeJS.ReadableStream | null = null;

  constructor(
    private readonly container: Docker.Container,
    private readonly modem: Docker['modem'],
    private readonly writer: LogWriter,
    /** The engine's words for an error. */
    private readonly describe: (e: unknown) => string,
    /** How long the engine may take to answer a read of the output; a follow is then not bounded, the container may run for days. */
    private readonly answerMs: number = ENGINE_ANSWER_MS,
  ) {}

  /** Copies the output until the engine ends the follow. Never rejects: a capture that breaks says so in the log, where its reader looks. */
  async follow(): Promise<void> {
    try {
      // timestamps: each frame starts with the time the engine received it, which stays
      // true when output is re-read after a restart, and orders the read after exit.
      const stream = await answered({ answerMs: this.answerMs }, "following the container's output", (abortSignal) =>
        this.container.logs({ follow: true, stdout: true, stderr: true, timestamps: true, abortSignal }),
      );
      this.following = stream;
      await this.demux(stream);
    } catch (e) {
      this.writer.append('stderr', `[dms] output capture stopped: ${this.describe(e)}\n`);
    } finally {
      this.following = null;
    }
  }

  /** Ends the follow, saying why in the log: the engine no longer answers for the container, and may never end it. */
  stop(reason: Error): void {
    (this.following as { destroy?: (e: Error) => void } | null)?.destroy?.(reason);
  }

  /**
   * Once the container exited: waits for `followed` (follow()'s promise) to end. The engine ends
   * the follow at the end of the log; one it keeps open past its answer bound is ended here,
   * saying so in the log, and finish() reads again what the follow did not copy.
   */
  async followEnded(followed: Promise<void>): Promise<void> {
    const late = () => this.stop(new EngineSilent(`the Docker engine kept the container's output open ${this.answerMs} ms after the container exited`));
    await settledWithin(followed, this.answerMs, late);
    await followed;
  }

  /** Once the container exited and the follow ended: appends what the follow did not see, then closes the log. Never rejects. */
  async finish(): Promise<void> {
    try {
      // A second early: the other stream's frames may be stamped a little before the last followed.
      const since = this.lastFollowed === null ? 0 : Math.max(0, Number(this.lastFollowed / 1_000_000_000n) - 1);
      // Streamed, as the follow: without `follow` the client buffers the whole answer, and a job
      // may write its log's bound within the last second. The container has exited, so the
      // engine ends it at the end of the log.
      const what = "reading the container's output again";
      const stream = await answered({ answerMs: this.answerMs }, what, (abortSignal) => this.container.logs({ follow: true, stdout: true, stderr: true, timestamps: true, since, abortSignal }));
      this.catchingUp = { stdout: this.last.stdout?.count ?? 0, stderr: this.last.stderr?.count ?? 0 };
      // It has exited: the engine has all of it and ends the read, so a silence is the engine's.
      await this.demux(Readable.from(heard(stream as AsyncIterable<Buffer>, this.answerMs, what)));
    } catch {
      // Removed meanwhile, or the engine gone: the follow's copy is what there is.
    } finally {
      this.catchingUp = null;
      await this.writer.close();
    }
  }

  /** Closes the log without reading again (the container is gone). */
  close(): Promise<void> {
    return this.writer.close();
  }

  private demux(stream: NodeJS.ReadableStream): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      this.modem.demuxStream(stream, this.sink('stdout'), this.sink('stderr'));
      stream.on('end', resolve);
      stream.on('error', reject);
    });
  }

  /**
   * Receives one demultiplexed frame per write (docker-modem writes frame by frame), strips the
   * engine's timestamp and appends the rest to the log. The decoder keeps a character the engine
   * split across two frames (it cuts long lines at 16 KiB) whole.
   */
  private sink(stream: Stream): Writable {
    return new Writable({
      write: (frame: Buffer, _encoding, done) => {
        this.frame(stream, frame);
        done();
      },
    });
  }

  private frame(stream: Stream, frame: Buffer): void {
    // The timestamp is ASCII up to the first space; only the rest goes through the decoder,
    // which may be holding the first bytes of a character from the previous frame.
    const space = frame.indexOf(0x20);
    const stamp = space > 0 ? frame.subarray(0, space).toString('latin1') : '';
    const ns = timestampNs(stamp);
    if (this.catchingUp && !this.isNew(stream, ns)) return;
    if (ns !== null) {
      const last = this.last[stream];
      this.last[stream] = last?.ns === ns ? { ns, count: last.count + 1 } : { ns, count: 1 };
      if (!this.catchingUp) this.lastFollowed = ns;
    }
    const text = this.decoders[stream].write(ns === null ? frame : frame.subarray(space + 1));
    this.writer.append(stream, text, ns === null ? new Date() : new Date(Number(ns / 1_000_000n)));
  }

  /** Whether a frame read again after exit is one the follow did not append. */
  private isNew(stream: Stream, ns: bigint | null): boolean {
    const last = this.last[stream];
    // Without a timestamp it cannot be placed: the follow's copy stands.
    if (ns === null) return false;
    if (last === null || ns > last.ns) return true;
    if (ns < last.ns) return false;
    // As old as the stream's newest appended: the first of those were the follow's.
    return this.catchingUp![stream]-- <= 0;
  }
}
