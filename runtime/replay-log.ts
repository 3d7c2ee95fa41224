import { closeSync, existsSync, fsyncSync, openSync, readFileSync, renameSync, writeSync } from 'node:fs';
import { DmsError, errorText } from './errors.js';
import { ReplayCache, type ReplayJournal, type ReplayLimits } from './replay.js';
import { parseSenderHex, type SenderHash, senderHex } from './replay-table.js';
import { nowNs } from './time.js';

export interface ReplayLogOptions {
  /** The log is never rewritten below this many lines (rewrites of a small log are waste). */
  minCompactLines?: number;
}

const MIN_COMPACT_LINES = 4096;

/** Marks a line's sender as the hash the cache keys by, where logs before it had the from.id. */
const HASHED = '~';

/**
 * Persists the replay cache in the node home as an append-only text file, one line
 * `<exp> ~<sender> <nonce>` per admitted entry (sender: the 24 hex digits of the 96-bit hash of
 * from.id the cache keys by), so an envelope accepted before a restart is
 * still refused after it. Each line is written with one write(2) on a descriptor opened once:
 * the page cache keeps it when the process dies (kill -9); only a machine crash can lose the
 * last lines, and no fsync per envelope is paid on the hot path. At start the file is read,
 * expired entries dropped and the rest rewritten; while running it is rewritten from the live
 * entries whenever it has grown past about twice their number.
 */
export class ReplayLog implements ReplayJournal {
  private fd: number;
  private lines = 0;
  private readonly minCompactLines: number;

  private constructor(
    readonly path: string,
    opts: ReplayLogOptions,
  ) {
    this.minCompactLines = opts.minCompactLines ?? MIN_COMPACT_LINES;
    this.fd = -1;
  }

  /** A replay cache backed by the log at `path`, holding every unexpired entry the log had. */
  static open(path: string, limits: ReplayLimits, opts: ReplayLogOptions = {}): ReplayCache {
    const log = new ReplayLog(path, opts);
    const cache = new ReplayCache(limits, log);
    if (existsSync(path)) log.load(cache);
    log.rewrite(cache);
    return cache;
  }

  append(sender: SenderHash, nonce: bigint, exp: bigint): void {
    try {
      writeSync(this.fd, logLine(sender, nonce, exp));
    } catch (e) {
      throw new DmsError('internal', `replay log ${this.path} cannot be written: ${errorText(e)}`, { cause: e });
    }
    this.lines++;
  }

  settle(cache: ReplayCache): void {
    if (this.lines > Math.max(this.minCompactLines, 2 * cache.size)) this.rewrite(cache);
  }

  close(): void {
    if (this.fd < 0) return;
    closeSync(this.fd);
    this.fd = -1;
  }

  /**
   * Reads the entries back; a torn last line (a crash mid-write) or garbage is skipped, not fatal.
   * A line of an older log, `<exp> <from.id> <nonce>`, is read too (its from.id hashed), and the
   * rewrite at start writes it anew: the log migrates itself.
   */
  private load(cache: ReplayCache): void {
    const now = nowNs();
    for (const line of readFileSync(this.path, 'utf8').split('\n')) {
      const first = line.indexOf(' ');
      const last = line.lastIndexOf(' ');
      if (first <= 0 || last <= first + 1) continue;
      const exp = toBigInt(line.slice(0, first));
      const nonce = toBigInt(line.slice(last + 1));
      if (exp === undefined || nonce === undefined) continue;
      const who = line.slice(first + 1, last);
      const sender = who.startsWith(HASHED) ? parseSenderHex(who.slice(1)) : who;
      if (sender !== undefined) cache.restore(sender, nonce, exp, now);
    }
  }

  /**
   * Replaces the file with the cache's live entries: written to a temporary file, synced and
   * renamed over the log, so a crash leaves either the old log or the new one, never half.
   */
  private rewrite(cache: ReplayCache): void {
    const tmp = `${this.path}.tmp`;
    const out = openSync(tmp, 'w', 0o600);
    let count = 0;
    try {
      let chunk = '';
      cache.forEachEntry((sender, nonce, exp) => {
        chunk += logLine(sender, nonce, exp);
        count++;
        if (chunk.length > 1 << 16) {
          writeSync(out, chunk);
          chunk = '';
        }
      });
      if (chunk) writeSync(out, chunk);
      fsyncSync(out);
    } finally {
      closeSync(out);
    }
    renameSync(tmp, this.path);
    this.close();
    this.fd = openSync(this.path, 'a', 0o600);
    this.lines = count;
  }
}

function logLine(sender: SenderHash, nonce: bigint, exp: bigint): string {
  return `${exp} ${HASHED}${senderHex(sender)} ${nonce}\n`;
}

function toBigInt(text: string): bigint | undefined {
  if (!/^\d{1,20}$/.test(text)) return undefined;
  return BigInt(text);
}
