/**
 * Volumes (README "Job outputs"): named directories under `<home>/data/volumes/<name>` that jobs
 * on this node mount (`inputs: [{source: "volume:<name>", path, writable: true}]`), so what one
 * job writes the next reads. A volume lives on the node it was made on and holds its size of the
 * node's storage share from its creation; what jobs write into it is measured against that size
 * (diskUsage, actors/executors/storage-watch.ts), as the kernel enforces no quota on a directory.
 */
import { chmodSync, existsSync, readFileSync, rmSync } from 'node:fs';
import { lstat, opendir } from 'node:fs/promises';
import { join, relative } from 'node:path';
import { DmsError, notFound } from './errors.js';
import { makeDirs, writeJsonAtomic } from './files.js';

export interface Volume {
  name: string;
  size: number;
  created_at: string;
}

export const MAX_VOLUMES = 256;

/** A job not yet ended that mounts a volume: its id, status, and whether it writes it. */
export interface VolumeUser {
  id: string;
  status: string;
  writable: boolean;
}

/** The jobs not yet ended that mount volume `name` (the job store's answer, a few at most). */
export type VolumeUsers = (name: string) => Promise<VolumeUser[]>;

export class Volumes {
  private readonly meta: string;
  private users: VolumeUsers = async () => [];

  constructor(readonly dir: string) {
    this.meta = join(dir, 'volumes.json');
  }

  /** Where the jobs that mount a volume are found: the job store, once it is open. */
  usersFrom(users: VolumeUsers): void {
    this.users = users;
  }

  /**
   * Refuses (conflict, naming the job) to `verb` volume `name` while a job that has not ended
   * mounts it (with `writers`, only one that mounts it writable). Deleted under a running job,
   * its directory lived on, unlisted and uncounted, and took the job's writes, while a volume of
   * the same name began empty; a pending one failed at its start. Snapshotted under a writer, a
   * file or directory that went meanwhile failed the snapshot (500), and one swapped for a link
   * between its check and its read would be read through the link, from the node's own disk.
   */
  async refuseInUse(name: string, verb: string, opts: { writers?: boolean } = {}): Promise<void> {
    this.get(name);
    const user = (await this.users(name)).find((u) => !opts.writers || u.writable);
    if (user) {
      const how = user.writable ? 'mounts it writable' : 'mounts it';
      throw new DmsError('conflict', `volume ${name}: cannot ${verb} it while job ${user.id} (${user.status}) ${how}; cancel the job or wait until it ends`);
    }
  }

  list(): Volume[] {
    try {
      const all = JSON.parse(readFileSync(this.meta, 'utf8')) as Volume[];
      return Array.isArray(all) ? all : [];
    } catch {
      return [];
    }
  }

  get(name: string): Volume {
    const v = this.list().find((x) => x.name === name);
    if (!v) throw notFound(`volume ${name} does not exist on this node`);
    return v;
  }

  /** The directory a job mounts. */
  path(name: string): string {
    return join(this.dir, 'data', this.get(name).name);
  }

  create(name: string, size: number): Volume {
    const all = this.list();
    if (all.some((v) => v.name === name)) throw new DmsError('conflict', `volume ${name} already exists`);
    if (all.length >= MAX_VOLUMES) throw new DmsError('too_large', `at most ${MAX_VOLUMES} volumes`);
    const dir = join(this.dir, 'data', name);
    makeDirs(dir);
    // Jobs may run as any user (jobs.container_user): the volume is theirs to write.
    chmodSync(dir, 0o777);
    const v: Volume = { name, size, created_at: new Date().toISOString() };
    writeJsonAtomic(this.meta, [...all, v]);
    return v;
  }

  remove(name: string): Volume {
    const v = this.get(name);
    writeJsonAtomic(this.meta, this.list().filter((x) => x.name !== name));
    const dir = join(this.dir, 'data', name);
    if (existsSync(dir)) rmSync(dir, { recursive: true, force: true });
    return v;
  }
}

/**
 * What each file, directory or link costs besides its blocks (about an inode and a directory
 * entry): a million empty files would otherwise cost nothing.
 */
export const ENTRY_BYTES = 4096;

/** How many entries are measured at once: enough to keep libuv's threads busy, few enough to hold little. */
const STAT_BATCH = 32;

/**
 * Most files and directories one walk measures: what it holds (directories to visit, linked
 * files seen) and its time stay bounded whatever the volume's size. A volume holding more
 * cannot be measured, and so counts as past its size.
 */
export const MAX_WALK_ENTRIES = 250_000;

/** The disk a directory takes (diskUsage): its bytes, or why it could not all be counted. */
export interface DiskUsage {
  bytes: number;
  /** Relative to the directory: a job made it unreadable, so what it holds cannot be counted. */
  unreadable?: string;
  /** It holds more than MAX_WALK_ENTRIES files and directories, and was within `stopAbove` when they ran out: what is past them was not counted. */
  tooMany?: true;
}

/**
 * The disk `dir` takes: each entry's allocated blocks, at least ENTRY_BYTES, a file with several
 * links once. Counting stops once past `stopAbove`, so a walk costs at most `stopAbove /
 * ENTRY_BYTES` entries whatever a job wrote, and entries are read as the directory gives them,
 * never a whole listing at once. What vanishes during the walk is not counted.
 */
export async function diskUsage(dir: string, stopAbove: number, maxEntries = MAX_WALK_ENTRIES): Promise<DiskUsage> {
  let bytes = 0;
  let entries = 0;
  const linked = new Set<string>();
  const dirs = [dir];
  const count = async (paths: string[]) => {
    const stats = await Promise.all(paths.map((p) => lstat(p).catch((e: NodeJS.ErrnoException) => (e.code === 'ENOENT' ? undefined : Promise.reject(e)))));
    entries += paths.length;
    stats.forEach((st, i) => {
      if (!st) return;
      if (st.isDirectory()) dirs.push(paths[i]!);
      else if (st.nlink > 1) {
        const key = `${st.dev}:${st.ino}`;
        if (linked.has(key)) return;
        linked.add(key);
      }
      bytes += Math.max(st.blocks * 512, ENTRY_BYTES);
    });
  };
  while (dirs.length > 0 && bytes <= stopAbove && entries < maxEntries) {
    const at = dirs.pop()!;
    try {
      const listing = await opendir(at, { bufferSize: STAT_BATCH });
      let batch: string[] = [];
      // Leaving the loop early closes the directory.
      for await (const entry of listing) {
        batch.push(join(at, entry.name));
        if (batch.length < STAT_BATCH) continue;
        await count(batch);
        batch = [];
        if (bytes > stopAbove || entries >= maxEntries) break;
      }
      await count(batch);
    } catch (e) {
      const code = (e as NodeJS.ErrnoException).code;
      // Gone, or no longer a directory, since it was listed: a job may change what it writes while it is measured.
      if (code === 'ENOENT' || code === 'ENOTDIR') continue;
      if (code === 'EACCES' || code === 'EPERM') return { bytes, unreadable: relative(dir, at) || '.' };
      throw e;
    }
  }
  return entries >= maxEntries && bytes <= stopAbove ? { bytes, tooMany: true } : { bytes };
}
