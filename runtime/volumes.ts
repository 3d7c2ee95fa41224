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

export class Volumes {
  private readonly meta: string;

  constructor(readonly dir: string) {
    this.meta = join(dir, 'volumes.json');
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
