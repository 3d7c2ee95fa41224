/**
 * Volumes (README "Job outputs"): named directories under `<home>/data/volumes/<name>` that jobs
 * on this node mount (`inputs: [{source: "volume:<name>", path, writable: true}]`), so what one
 * job writes the next reads. A volume lives on the node it was made on; its size is what the
 * operator set aside for it, recorded and listed, not a quota the kernel enforces.
 */
import { chmodSync, existsSync, readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
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
