/**
 * The images this node pulled for jobs, and the bound on the disk they hold
 * (`jobs.max_images_bytes`; README "Images"). A job's image is its requester's choice: any node
 * that may place jobs here could otherwise have this one pull image after image, each as large
 * as a registry serves, until its disk is full, outside the share its operator onboarded.
 *
 * Only images this node pulled are counted and removed: one the engine already had is its
 * operator's. They are kept in `<home>/data/images.json` with when each last started a job, so
 * a restarted node still knows them. After a pull that takes them past the bound, those used
 * longest ago that no container uses are removed (their names untagged: the engine deletes an
 * image once nothing names it, and refuses while a container, even a stopped one, uses it); a
 * job whose image cannot fit fails naming the sizes, and its image is removed again.
 *
 * An image's size is the engine's `Size`, its layers shared with other images counted in each:
 * the sum is at least what the images hold on disk, so the bound is kept, at worst with room to spare.
 */
import { existsSync, readFileSync } from 'node:fs';
import { z } from 'zod';
import { formatBytes } from '../../runtime/bytes.js';
import { DmsError, errorText } from '../../runtime/errors.js';
import { writeJsonAtomic } from '../../runtime/files.js';
import type { Logger } from '../../runtime/log.js';
import { type Engine, inspectImage, removeImage } from './engine.js';
import type { PullEvent } from './pull.js';

/** How soon a job's use of an image is written: one write for the jobs of a burst, not one each. */
const SAVE_USE_MS = 1_000;
/** Most images kept on record: past it the oldest record is removed as if over the bound. */
export const MAX_IMAGE_RECORDS = 10_000;

const RecordSchema = z.object({
  /** The engine's image id (`sha256:…`). */
  id: z.string().min(1).max(200),
  /** The names jobs asked for it by. */
  refs: z.array(z.string().min(1).max(1024)).max(64),
  size: z.number().int().nonnegative(),
  /** ms since the epoch: its pull, or the last job started on it. */
  used_at: z.number().int().nonnegative(),
});
type ImageRecord = z.infer<typeof RecordSchema>;
const FileSchema = z.object({ images: z.array(RecordSchema).max(MAX_IMAGE_RECORDS) });

export interface ImageCacheOptions {
  engine: Engine;
  /** Where the records are kept; none: in memory only (tests of one process). */
  file?: string;
  /** Bytes the pulled images may hold together. */
  maxBytes: number;
  /** Told what the recorded images hold, at start and after each change (`dms_pulled_images` on /metrics). */
  report?: (held: { bytes: number; count: number }) => void;
  log?: Logger;
  now?: () => number;
}

/** A pull or an image past the bound: the job fails with it, and what the pull left is removed. */
export class ImageOverBound extends DmsError {
  constructor(message: string) {
    super('unavailable', message);
  }
}

export class ImageCache {
  /** By image id. */
  private readonly records = new Map<string, ImageRecord>();
  /** Names a job is between its pull and its container's creation with: not removed meanwhile. */
  private readonly starting = new Map<string, number>();
  /** The layers the pulls running now download, by the engine's layer id: the room they will take, and how many pulls share each. */
  private readonly downloading = new Map<string, { bytes: number; pulls: number }>();
  /** One pull's bookkeeping and removals at a time: two at once would each count the other's image as removable. */
  private turn: Promise<unknown> = Promise.resolve();
  private readonly now: () => number;
  private saveTimer: NodeJS.Timeout | undefined;

  constructor(private readonly opts: ImageCacheOptions) {
    this.now = opts.now ?? Date.now;
    this.load();
    this.told();
  }

  private told(): void {
    this.opts.report?.({ bytes: this.heldBytes, count: this.records.size });
  }

  /** Bytes the recorded images hold, as the engine last measured them. */
  private get heldBytes(): number {
    let sum = 0;
    for (const r of this.records.values()) sum += r.size;
    return sum;
  }

  /** Keeps `image` from removal until the returned function is called (a job's start: pull, then create). */
  hold(image: string): () => void {
    this.starting.set(image, (this.starting.get(image) ?? 0) + 1);
    let released = false;
    return () => {
      if (released) return;
      released = true;
      const left = (this.starting.get(image) ?? 1) - 1;
      if (left > 0) this.starting.set(image, left);
      else this.starting.delete(image);
    };
  }

  /** A job starts on `image`: it becomes the most recently used (written within SAVE_USE_MS: a lost use only ages an image). */
  used(image: string): void {
    for (const r of this.records.values()) {
      if (!r.refs.includes(image)) continue;
      r.used_at = this.now();
      this.saveTimer ??= setTimeout(() => this.save(), SAVE_USE_MS).unref();
      return;
    }
  }

  /** Writes what is not yet written (the executor's close). */
  close(): void {
    if (this.saveTimer) this.save();
  }

  /**
   * Watches one pull of `image`: its guard ends the pull once the layers it downloads, beside
   * those the other pulls running now download, are past the bound. The engine tells each layer's
   * size as its download starts, so an image larger than the bound does not fill the disk before
   * its size is known, and jobs started at once cannot each take the bound's room (a layer two
   * pulls share is counted once). Layers the engine has already are not downloaded, nor counted
   * here; what is pulled is measured whole after (pulled()). `end` is called as the pull ends,
   * however it ends: its layers are then the engine's, counted in the records.
   */
  pulling(image: string): { guard: (line: PullEvent) => ImageOverBound | undefined; end: () => void } {
    const mine = new Map<string, number>();
    const max = this.opts.maxBytes;
    let ended = false;
    const guard = (line: PullEvent): ImageOverBound | undefined => {
      const total = line.progressDetail?.total;
      // A line the engine's stream still held when the pull ended is no download of this pull's.
      if (ended || line.status !== 'Downloading' || !line.id || !total || mine.get(line.id) === total) return undefined;
      const shared = this.downloading.get(line.id) ?? { bytes: 0, pulls: 0 };
      if (!mine.has(line.id)) shared.pulls += 1;
      shared.bytes = Math.max(shared.bytes, total);
      this.downloading.set(line.id, shared);
      mine.set(line.id, total);
      let own = 0;
      for (const bytes of mine.values()) own += bytes;
      const all = this.downloadingBytes;
      if (all <= max) return undefined;
      return new ImageOverBound(
        own > max
          ? `image ${image} has at least ${formatBytes(own)} of layers to download, more than the ${formatBytes(max)} of images this node keeps (jobs.max_images_bytes)`
          : `image ${image} has at least ${formatBytes(own)} of layers to download, which do not fit beside the ${formatBytes(all - own)} the pulls running here are downloading: this node keeps ${formatBytes(max)} of images (jobs.max_images_bytes)`,
      );
    };
    const end = () => {
      if (ended) return;
      ended = true;
      for (const id of mine.keys()) {
        const shared = this.downloading.get(id);
        if (shared && --shared.pulls <= 0) this.downloading.delete(id);
      }
    };
    return { guard, end };
  }

  /** Bytes the layers of the pulls running now will hold. */
  private get downloadingBytes(): number {
    let sum = 0;
    for (const layer of this.downloading.values()) sum += layer.bytes;
    return sum;
  }

  /** Removes what a pull cut short by the bound left of `image` (the whole image, when it landed before the cut), unless another job is starting on it. */
  async forget(image: string): Promise<void> {
    if (this.heldByAnother(image)) return;
    const known = [...this.records.values()].find((r) => r.refs.includes(image));
    if (known) await this.remove(known);
    else await this.untag([image]);
    this.save();
  }

  /** Whether a job other than the one asking is between its pull of `image` and its container. */
  private heldByAnother(image: string): boolean {
    return (this.starting.get(image) ?? 0) > 1;
  }

  /**
   * `image` was just pulled: it is put on record, and images used longest ago are removed until
   * the records fit the bound. Fails, with `image` removed unless something else holds it, when
   * it cannot fit: larger than the bound itself, or beside images in use that leave it no room.
   */
  pulled(image: string): Promise<void> {
    return this.inTurn(() => this.record(image));
  }

  /** Runs `work` once the bookkeeping before it has ended, however that ended. */
  private inTurn(work: () => Promise<void>): Promise<void> {
    const next = this.turn.then(work);
    this.turn = next.catch(() => undefined);
    return next;
  }

  private async record(image: string): Promise<void> {
    const info = await inspectImage(this.opts.engine, image);
    const known = this.records.get(info.Id);
    const entry: ImageRecord = known ?? { id: info.Id, refs: [], size: info.Size, used_at: 0 };
    if (!entry.refs.includes(image)) entry.refs = [...entry.refs.slice(-63), image];
    entry.size = info.Size;
    entry.used_at = this.now();
    this.records.set(entry.id, entry);
    const max = this.opts.maxBytes;
    // Removing others cannot make room for an image larger than the bound.
    if (entry.size <= max) await this.fit(entry.id);
    if (this.heldBytes <= max) return this.save();
    const why =
      entry.size > max
        ? `image ${image} is ${formatBytes(entry.size)}, more than the ${formatBytes(max)} of images this node keeps (jobs.max_images_bytes)`
        : `image ${image} (${formatBytes(entry.size)}) does not fit beside the ${formatBytes(this.heldBytes - entry.size)} of images in use here: this node keeps ${formatBytes(max)} of images (jobs.max_images_bytes)`;
    if (!this.heldByAnother(image)) await this.remove(entry);
    this.save();
    throw new ImageOverBound(why);
  }

  /**
   * Removes the images used longest ago until the records fit the bound, as after a pull: at the
   * executor's start, so a bound lowered since the last run (an operator freeing disk) is kept
   * at once rather than at the next pull.
   */
  trim(): Promise<void> {
    return this.inTurn(async () => {
      if (this.fits) return;
      await this.fit();
      this.save();
    });
  }

  /** Whether the records are within the bound and the most records kept. */
  private get fits(): boolean {
    return this.heldBytes <= this.opts.maxBytes && this.records.size <= MAX_IMAGE_RECORDS;
  }

  /** Removes the images used longest ago, other than `keep` (the image just pulled) and those starting a job, until the records fit. */
  private async fit(keep?: string): Promise<void> {
    for (const r of this.oldestFirst()) {
      if (this.fits) return;
      if (r.id === keep || r.refs.some((ref) => this.starting.has(ref))) continue;
      await this.remove(r);
    }
  }

  /** Untags each name of `r`; the record goes once the engine no longer has the image. A container using it keeps it. */
  private async remove(r: ImageRecord): Promise<void> {
    const kept = await this.untag(r.refs, r.size);
    if (kept.length === 0) this.records.delete(r.id);
    else r.refs = kept;
  }

  /** Removes each name; returns those the engine kept (in use, or an error it gave, logged). */
  private async untag(refs: readonly string[], size?: number): Promise<string[]> {
    const kept: string[] = [];
    for (const ref of refs) {
      try {
        if (await removeImage(this.opts.engine, ref)) {
          this.opts.log?.info({ image: ref, size }, 'pulled image removed (jobs.max_images_bytes)');
          continue;
        }
        this.opts.log?.debug({ image: ref }, 'pulled image in use: kept');
      } catch (e) {
        this.opts.log?.warn({ image: ref, err: errorText(e) }, 'could not remove a pulled image');
      }
      kept.push(ref);
    }
    return kept;
  }

  private oldestFirst(): ImageRecord[] {
    return [...this.records.values()].sort((a, b) => a.used_at - b.used_at);
  }

  private load(): void {
    const file = this.opts.file;
    if (!file || !existsSync(file)) return;
    try {
      const parsed = FileSchema.parse(JSON.parse(readFileSync(file, 'utf8')));
      for (const r of parsed.images) this.records.set(r.id, r);
    } catch (e) {
      // Not the node's to refuse starting over: what it forgets it no longer removes, as before the bound.
      this.opts.log?.warn({ file, err: errorText(e) }, 'the record of pulled images is unreadable: starting a new one');
    }
  }

  private save(): void {
    clearTimeout(this.saveTimer);
    this.saveTimer = undefined;
    this.told();
    if (!this.opts.file) return;
    try {
      writeJsonAtomic(this.opts.file, { images: this.oldestFirst() });
    } catch (e) {
      this.opts.log?.warn({ file: this.opts.file, err: errorText(e) }, 'could not write the record of pulled images');
    }
  }
}
