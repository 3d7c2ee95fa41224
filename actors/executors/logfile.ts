/**
 * A job's output on disk: one JSON line per chunk ({stream, data, at}) in <dir>/<job id>.log,
 * so stdout and stderr keep their interleaving and timestamps, the output outlives the
 * process that captured it, and a reader can follow a run while it writes.
 *
 * Each log is capped (`jobs.max_log_bytes`): past the cap the writer drops output and ends the
 * file with one marker chunk saying where it cut. Readers address the file by byte offset, so a
 * page costs a read of that page, never of everything before it.
 *
 * A job placed again (its node lost, or a pinned node back) starts a new log; the one before is
 * kept as <dir>/previous/<job id>.log, the run before the current one only (as `kubectl logs
 * --previous`): a lost run's output is often why it was lost.
 */
import { EventEmitter, once } from 'node:events';
import { open, rename, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { finished } from 'node:stream/promises';
import { promisify } from 'node:util';
import { closeSync, existsSync, fstatSync, openSync, read, readSync, type WriteStream } from 'node:fs';
import { DmsError, invalid } from '../../runtime/errors.js';
import type { LogChunk, LogPage } from '../../behaviors/jobs/execution.js';
import { makeDirsAsync } from '../../runtime/files.js';

/** Output kept per job when no cap is given (`jobs.max_log_bytes`'s default). */
export const DEFAULT_MAX_LOG_BYTES = 64 * 1024 * 1024;
/** Most bytes one page read may take, whatever the caller asks: the memory a read may cost. */
export const MAX_PAGE_BYTES = 8 * 1024 * 1024;

/** Under the logs' directory: the output of each job's run before its current one. */
const PREVIOUS_DIR = 'previous';
const emptyPage = (): LogPage => ({ chunks: [], next: 0, size: 0, log: null });

/** The text of the marker chunk that ends a log cut at `limit` bytes. */
export const cutNotice = (limit: number): string => `[dms] output cut at ${limit} bytes\n`;

export class LogWriter {
  /** Bumped whenever new bytes reached the file or it closed: readers compare to skip waits. */
  version = 0;
  closed = false;
  readonly changes = new EventEmitter();
  /** Bytes handed to the file so far. */
  private written = 0;
  /** The cap was reached: the marker is written and nothing more is. */
  private cut = false;

  constructor(
    private readonly stream: WriteStream,
    private readonly onClosed: () => void,
    private readonly maxBytes: number = DEFAULT_MAX_LOG_BYTES,
  ) {
    // Readers wait on this emitter; many concurrent followers of one job are expected.
    this.changes.setMaxListeners(0);
    // A failing disk loses output, never the run: the job's result matters more than its log,
    // and an unhandled stream error would take the whole node down.
    this.stream.on('error', () => undefined);
  }

  /**
   * Stores a chunk. Its time is when it arrived unless `at` is a time: a provider's page of output
   * (the remote follower) says its chunks' times, and one that is not a time (`new Date('x')`)
   * once threw here, and the run was lost with its output.
   */
  append(stream: LogChunk['stream'], data: string, at: Date = new Date()): void {
    if (this.closed || this.cut || data === '') return;
    const line = JSON.stringify({ stream, data, at: (Number.isNaN(at.getTime()) ? new Date() : at).toISOString() } satisfies LogChunk) + '\n';
    const size = Buffer.byteLength(line);
    if (this.written + size > this.maxBytes) {
      // Whole chunks only, so every line stays readable; the marker is the one line past the cap.
      this.cut = true;
      const notice = JSON.stringify({ stream: 'stderr', data: cutNotice(this.maxBytes), at: new Date().toISOString() } satisfies LogChunk) + '\n';
      this.stream.write(notice, () => this.changed());
      return;
    }
    this.written += size;
    this.stream.write(line, () => this.changed());
  }

  /** The cap was reached: whatever is appended now is dropped. */
  get full(): boolean {
    return this.cut;
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.stream.end();
    await finished(this.stream).catch(() => undefined);
    this.closed = true;
    this.onClosed();
    this.changed();
  }

  private changed(): void {
    this.version++;
    this.changes.emit('change');
  }
}

export class JobLogs {
  private readonly live = new Map<string, LogWriter>();
  // Made once, not per job: on a busy node a mkdir per job is a measurable share of its cost.
  private dirReady?: Promise<void>;

  constructor(
    readonly dir: string,
    private readonly maxBytes: number = DEFAULT_MAX_LOG_BYTES,
  ) {}

  private ensureDir(): Promise<void> {
    this.dirReady ??= makeDirsAsync(this.dir).then(
      () => undefined,
      (e) => {
        this.dirReady = undefined;
        throw e;
      },
    );
    return this.dirReady;
  }

  path(jobId: string): string {
    // The id becomes a file name: refuse anything that could leave the directory.
    if (!/^[A-Za-z0-9_-][A-Za-z0-9_.-]*$/.test(jobId)) throw invalid(`job id ${JSON.stringify(jobId)} is not usable as a log name`);
    return join(this.dir, `${jobId}.log`);
  }

  /** Where the output of the job's run before its current one is kept. */
  previousPath(jobId: string): string {
    this.path(jobId); // refuses an id that is no file name
    return join(this.dir, PREVIOUS_DIR, `${jobId}.log`);
  }

  /**
   * Moves what an earlier run of the job left (a job placed again) to its previous-run place,
   * replacing the one kept there, so a new run shows its own output only, even one that writes
   * none, and the run before stays readable (readPreviousPage).
   */
  async retire(jobId: string): Promise<void> {
    if (this.live.has(jobId)) throw new DmsError('conflict', `output of job ${jobId} is being captured`);
    const path = this.path(jobId);
    // Looked up first, a cached directory entry: nearly every run has nothing to move.
    if (!existsSync(path)) return;
    await makeDirsAsync(join(this.dir, PREVIOUS_DIR));
    await rename(path, this.previousPath(jobId));
  }

  /** Starts the job's log afresh (a rerun or a re-capture replaces the old one). */
  async create(jobId: string): Promise<LogWriter> {
    if (this.live.has(jobId)) throw new DmsError('conflict', `output of job ${jobId} is already being captured`);
    await this.ensureDir();
    const file = await open(this.path(jobId), 'w');
    const writer = new LogWriter(file.createWriteStream(), () => this.live.delete(jobId), this.maxBytes);
    this.live.set(jobId, writer);
    return writer;
  }

  /**
   * Whole chunks stored from byte `from` on, reading at most `limit` bytes (more only when one
   * chunk is longer, up to MAX_PAGE_BYTES). `from` past the end is taken as the end; `from`
   * inside a chunk starts at the next one. `next` is where the following page starts.
   */
  async readPage(jobId: string, from: number, limit: number, log?: string): Promise<LogPage> {
    const path = this.path(jobId);
    // A silent run leaves no file: looked up first, a cached directory entry, where a failed
    // open would cost a trip to the thread pool and an error with its stack (a null job's
    // follower asks once per job).
    if (log === undefined && !this.live.has(jobId) && !existsSync(path)) return emptyPage();
    // Read first, its identity taken from the same open file: a retire between the two cannot
    // pass one log's bytes off as another's.
    const page = (await readPageOf(path, from, limit)) ?? emptyPage();
    if (log === undefined || page.log === log) return page;
    // `from` is an offset into a log a new run's has replaced: the rest of it where it is kept,
    // then the new one from its start.
    const rest = await readPageOf(this.previousPath(jobId), from, limit);
    if (rest && rest.log === log && (rest.chunks.length > 0 || rest.next > from)) return { ...rest, ahead: true };
    return from === 0 ? page : ((await readPageOf(path, 0, limit)) ?? emptyPage());
  }

  /** The same page of the output of the job's run before its current one; null when none is kept. */
  readPreviousPage(jobId: string, from: number, limit: number): Promise<LogPage | null> {
    return readPageOf(this.previousPath(jobId), from, limit);
  }

  /**
   * Resolves true once the log holds more than `from` bytes; false when it does not and no
   * capture is writing it any more, or when `signal` aborts.
   */
  async waitBeyond(jobId: string, from: number, signal: AbortSignal): Promise<boolean> {
    for (;;) {
      // The writer first: if it closes during the stat, the next pass sees both.
      const writer = this.live.get(jobId);
      const seen = writer?.version;
      if ((await this.size(jobId)) > from) return true;
      if (!writer || writer.closed || signal.aborted) return false;
      if (writer.version === seen) await nextChange(writer, signal);
    }
  }

  private async size(jobId: string): Promise<number> {
    try {
      return (await stat(this.path(jobId))).size;
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === 'ENOENT') return 0;
      throw e;
    }
  }
}

/**
 * Reads of at most this many bytes stay on the event loop. A log being followed was just
 * written and is in the page cache, and a page read through libuv's pool took four trips there
 * (open, stat, read, close), each waiting behind whatever else the pool ran: 1–4 ms per page at a
 * Docker job's end, when the job's final commit holds the pool too, on the path to its follower's
 * `end`. Larger reads, whose data may not be cached, go to the pool.
 */
const SYNC_READ_BYTES = 64 * 1024;
const readAsync = promisify(read);

/** A page of the log at `path` (JobLogs.readPage says how); null when there is no such file. */
async function readPageOf(path: string, from: number, limit: number): Promise<LogPage | null> {
  let file: number;
  try {
    // Metadata of a file in use: cheap where it is, and opened here it cannot be swapped before the read.
    file = openSync(path, 'r');
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return null;
    throw e;
  }
  try {
    const stats = fstatSync(file, { bigint: true });
    const size = Number(stats.size);
    // The file's own identity: a rename (retire) keeps it, a new run's log has another.
    const log = `${stats.ino}.${stats.birthtimeNs}`;
    let start = Math.min(from, size);
    // Not at a chunk's start (the byte before is not a newline): skip to the next chunk.
    if (start > 0 && start < size && (await byteAt(file, start - 1)) !== 0x0a) {
      const newline = await findNewline(file, start, size);
      start = newline < 0 ? size : newline + 1;
    }
    const want = Math.min(size - start, Math.max(1, Math.min(limit, MAX_PAGE_BYTES)));
    let buffer = await readAt(file, start, want);
    let end = buffer.lastIndexOf(0x0a);
    if (end < 0 && start + buffer.length < size) {
      // One chunk longer than the page: that chunk alone, whole, if it fits the hard bound.
      buffer = await readAt(file, start, Math.min(size - start, MAX_PAGE_BYTES));
      end = buffer.indexOf(0x0a);
      if (end < 0) return { chunks: [], next: start + buffer.length, size, log };
    }
    // A last line without its newline is still being written: it belongs to the next page.
    const chunks: LogChunk[] = [];
    let at = 0;
    for (let nl = buffer.indexOf(0x0a); nl >= 0 && nl <= end; nl = buffer.indexOf(0x0a, at)) {
      const chunk = parse(buffer.subarray(at, nl));
      if (chunk) chunks.push(chunk);
      at = nl + 1;
    }
    return { chunks, next: start + end + 1, size, log };
  } finally {
    closeSync(file);
  }
}

async function readAt(file: number, position: number, length: number, sync = length <= SYNC_READ_BYTES): Promise<Buffer> {
  const buffer = Buffer.alloc(length);
  let filled = 0;
  while (filled < length) {
    const bytesRead = sync ? readSync(file, buffer, filled, length - filled, position + filled) : (await readAsync(file, buffer, filled, length - filled, position + filled)).bytesRead;
    if (bytesRead === 0) break;
    filled += bytesRead;
  }
  return buffer.subarray(0, filled);
}

async function byteAt(file: number, position: number): Promise<number> {
  return (await readAt(file, position, 1))[0];
}

/** Offset of the first newline at or after `from`, -1 if none before `size`; through the pool, as a long chunk may take many blocks. */
async function findNewline(file: number, from: number, size: number): Promise<number> {
  for (let position = from; position < size; position += 64 * 1024) {
    const block = await readAt(file, position, Math.min(64 * 1024, size - position), false);
    const i = block.indexOf(0x0a);
    if (i >= 0) return position + i;
  }
  return -1;
}

async function nextChange(writer: LogWriter, signal?: AbortSignal): Promise<void> {
  try {
    await once(writer.changes, 'change', { signal });
  } catch (e) {
    if ((e as Error).name !== 'AbortError') throw e;
  }
}

/** A line cut short by a crash mid-write, or anything else that is not a chunk, is dropped rather than failing the read. */
function parse(line: Buffer): LogChunk | null {
  try {
    const value = JSON.parse(line.toString('utf8')) as Partial<LogChunk> | null;
    if (!value || typeof value !== 'object' || typeof value.data !== 'string' || typeof value.at !== 'string') return null;
    if (value.stream !== 'stdout' && value.stream !== 'stderr') return null;
    return value as LogChunk;
  } catch {
    return null;
  }
}
