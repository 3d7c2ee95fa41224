/**
 * A job's output on disk: one JSON line per chunk ({stream, data, at}) in <dir>/<job id>.log,
 * so stdout and stderr keep their interleaving and timestamps, the output outlives the
 * process that captured it, and a reader can follow a run while it writes.
 */
import { EventEmitter, once } from 'node:events';
import { mkdir, open, type FileHandle } from 'node:fs/promises';
import { join } from 'node:path';
import { finished } from 'node:stream/promises';
import type { WriteStream } from 'node:fs';
import { DmsError, invalid } from '../../runtime/errors.js';
import type { LogChunk, LogOptions } from './types.js';

export class LogWriter {
  /** Bumped whenever new bytes reached the file or it closed: readers compare to skip waits. */
  version = 0;
  closed = false;
  readonly changes = new EventEmitter();

  constructor(
    private readonly stream: WriteStream,
    private readonly onClosed: () => void,
  ) {
    // Readers wait on this emitter; many concurrent followers of one job are expected.
    this.changes.setMaxListeners(0);
    // A failing disk loses output, never the run: the job's result matters more than its log,
    // and an unhandled stream error would take the whole node down.
    this.stream.on('error', () => undefined);
  }

  append(stream: LogChunk['stream'], data: string, at: Date = new Date()): void {
    if (this.closed || data === '') return;
    const line = JSON.stringify({ stream, data, at: at.toISOString() } satisfies LogChunk) + '\n';
    this.stream.write(line, () => this.changed());
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

  constructor(readonly dir: string) {}

  private ensureDir(): Promise<void> {
    this.dirReady ??= mkdir(this.dir, { recursive: true }).then(
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

  /** Starts the job's log afresh (a rerun or a re-capture replaces the old one). */
  async create(jobId: string): Promise<LogWriter> {
    if (this.live.has(jobId)) throw new DmsError('conflict', `output of job ${jobId} is already being captured`);
    await this.ensureDir();
    const file = await open(this.path(jobId), 'w');
    const writer = new LogWriter(file.createWriteStream(), () => this.live.delete(jobId));
    this.live.set(jobId, writer);
    return writer;
  }

  async *read(jobId: string, opts: LogOptions = {}): AsyncGenerator<LogChunk> {
    let file: FileHandle;
    try {
      file = await open(this.path(jobId), 'r');
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === 'ENOENT') return;
      throw e;
    }
    try {
      const buffer = Buffer.alloc(64 * 1024);
      let position = 0;
      let pending = Buffer.alloc(0);
      for (;;) {
        // Look at the writer before reading: if it closes during the read, the next pass
        // drains what it wrote last and then stops.
        const writer = opts.follow ? this.live.get(jobId) : undefined;
        const seen = writer?.version;
        for (;;) {
          const { bytesRead } = await file.read(buffer, 0, buffer.length, position);
          if (bytesRead === 0) break;
          position += bytesRead;
          pending = Buffer.concat([pending, buffer.subarray(0, bytesRead)]);
          let newline: number;
          while ((newline = pending.indexOf(0x0a)) >= 0) {
            const chunk = parse(pending.subarray(0, newline));
            pending = pending.subarray(newline + 1);
            if (chunk) yield chunk;
          }
        }
        if (!writer || writer.closed || opts.signal?.aborted) return;
        if (writer.version === seen) await nextChange(writer, opts.signal);
      }
    } finally {
      await file.close();
    }
  }
}

async function nextChange(writer: LogWriter, signal?: AbortSignal): Promise<void> {
  try {
    await once(writer.changes, 'change', { signal });
  } catch (e) {
    if ((e as Error).name !== 'AbortError') throw e;
  }
}

/** A line cut short by a crash mid-write is dropped rather than failing the whole read. */
function parse(line: Buffer): LogChunk | null {
  try {
    return JSON.parse(line.toString('utf8')) as LogChunk;
  } catch {
    return null;
  }
}
